"""Carrying earlier results forward for agents that cannot resume a session."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["embed_context"]


def embed_context(prompt: str, earlier: Sequence[tuple[str, str]]) -> str:
    """``prompt`` preceded by the earlier steps' results, each under its node name.

    Used when the agent has no session resume: the new call sees what the earlier
    nodes produced as plain text. With no earlier results the prompt is unchanged.
    """
    if not earlier:
        return prompt
    parts = [
        "Earlier steps of this workflow produced the results below. Use them as context; "
        "do not redo that work.",
    ]
    for name, text in earlier:
        parts.append(f'<result step="{name}">\n{text.strip()}\n</result>')
    parts.append(f"Your task now:\n\n{prompt}")
    return "\n\n".join(parts)
