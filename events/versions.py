"""shep's version, and the version of the store's schema it writes: each said once, here.

``SHEP_VERSION`` is the one place the release is spelled: ``pyproject.toml``
reads it (``[tool.setuptools.dynamic]``), ``shep --version`` prints it, and
stores record it. A constant costs nothing at import, where asking the
installed metadata (``importlib.metadata``) would scan ``sys.path`` on every
``shep status``. It lives in ``events``, the innermost layer, because the
store records it and ``events`` imports nothing of ours.

Each stored event type has its own version (``Event.class_version``, see
``events.catalog``); each projection's is in ``projections.tables``.
"""

from __future__ import annotations

#: The version of shep (semantic versioning; see CHANGELOG.md).
SHEP_VERSION = "0.2.0"

#: The shape of the store's own tables (events, tracking, ``shep_meta``), on SQLite
#: and on the shared store alike. A newer shep migrates an older store forward once
#: (``events.migrations``); an older shep does not write to a newer one.
STORE_SCHEMA_VERSION = 2

#: The shape of the state a run's checkpoints hold, as ``shep.runs.checkpoints`` writes
#: it (in each checkpoint's metadata) and upcasts older ones. Said here, beside the
#: others, so that ``shep --version`` names it without importing LangGraph.
CHECKPOINT_STATE_VERSION = 1


def version_key(version: str) -> tuple[int, ...]:
    """``"0.10.2"`` as ``(0, 10, 2)``, to compare releases (a suffix such as ``rc1`` is
    ignored: ``"1.0.0rc1"`` compares as ``1.0.0``)."""
    parts = []
    for part in version.split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    return tuple(parts)


def is_newer(version: str | None, than: str) -> bool:
    """Whether release ``version`` is newer than ``than`` (an unknown one is not)."""
    return version is not None and version_key(version) > version_key(than)
