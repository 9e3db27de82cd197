"""A supervisor policy as a file (YAML or JSON): what `shep supervisor configure --policy`
and `shep supervisor what-if` read, checked strictly (an unknown field or guardrail is
one line naming the known ones, never silently ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from events.errors import PolicyError
from events.supervisor import EVALUATOR_TIMEOUT, Guardrails


class PolicyFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A policy as a file (YAML or JSON): what `configure --policy` and `what-if` read."""

    autonomy: str
    overrides: dict[str, str] = {}
    guardrails: dict[str, Any] = {}
    model: str | None = None
    timeout: float = EVALUATOR_TIMEOUT


def read_policy_file(path: Path) -> PolicyFile:
    """The policy file at ``path``; ``PolicyError`` saying what is wrong with it."""
    try:
        text = path.read_bytes()
    except OSError as e:
        raise PolicyError(f"Cannot read policy file {path}: {e.strerror}.") from None
    try:
        policy = msgspec.yaml.decode(text, type=PolicyFile)
        msgspec.convert(policy.guardrails, Guardrails, strict=True)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        # YAML errors span lines (the problem, then where): the CLI says it in one.
        raise PolicyError(f"Policy file {path}: {' '.join(str(e).split())}.") from None
    # Guardrails ignores fields it does not know: a misspelt rule would silently not apply.
    unknown = sorted(set(policy.guardrails) - set(Guardrails.__struct_fields__))
    if unknown:
        raise PolicyError(
            f"Policy file {path}: unknown guardrail {unknown[0]!r}; the rules are "
            f"{', '.join(Guardrails.__struct_fields__)}."
        )
    return policy
