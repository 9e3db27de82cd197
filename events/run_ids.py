"""A run named by a user: an id or a unique prefix of one, resolved the same way everywhere.

Apart from ``events.audit`` (which verifies the chain and needs hashlib): `shep status`
resolves a prefix without it.
"""

from __future__ import annotations

#: The environment variable each process shep starts for a run carries (the agent CLIs, a
#: feature's setup and test commands): the run's id, in hex. ``shep cancel`` finds a run's
#: agents by it even when their worker is gone.
RUN_ID_ENV = "SHEP_RUN_ID"


def hex_prefix(ref: str) -> str | None:
    """``ref`` as a lowercase prefix of a hex id (dashes dropped), or None if it cannot be."""
    prefix = ref.strip().lower().replace("-", "")
    if not prefix or len(prefix) > 32 or any(c not in "0123456789abcdef" for c in prefix):
        return None
    return prefix


def single_run(matches: list[str], ref: str) -> str:
    """The one run id of ``matches``: ``RunNotFoundError`` for none, ambiguity for several."""
    from events.errors import AmbiguousRunIdError, RunNotFoundError

    if not matches:
        raise RunNotFoundError(ref)
    if len(matches) > 1:
        raise AmbiguousRunIdError(
            f"Run id {ref!r} matches several runs; type more characters of it."
        )
    return matches[0]
