"""The version of the state a checkpoint holds, and how an older one is brought up to it.

The version this saver writes is ``CHECKPOINT_STATE_VERSION`` (said in
``events.versions`` so that ``shep --version`` names it without importing
LangGraph), recorded in each checkpoint's metadata under ``STATE_VERSION_KEY``
and taken out again when read (absent: version 1, shep 0.1.0). A newer shep
that changes it adds ``STATE_UPCASTERS[N]`` (a version-N checkpoint, in place,
to N+1); a checkpoint of a newer version is refused, never resumed from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import Checkpoint

from events.errors import StoreTooNewError
from events.versions import CHECKPOINT_STATE_VERSION, SHEP_VERSION

#: The metadata key that holds the checkpoint state's version.
STATE_VERSION_KEY = "shep_state_version"
#: ``STATE_UPCASTERS[N]`` brings a version-N checkpoint, in place, to version N+1.
STATE_UPCASTERS: dict[int, Callable[[Checkpoint], None]] = {}


@dataclass(frozen=True)
class Versioned:
    """A checkpoint's metadata as LangGraph gave it, and its state's version."""

    metadata: dict[str, Any]
    version: int


def state_versioned(stored: Any, checkpoint_id: str) -> Versioned:
    """The stored metadata without the state version, and the version (refused if newer)."""
    metadata = dict(stored)
    version = metadata.pop(STATE_VERSION_KEY, 1)
    if not isinstance(version, int) or version > CHECKPOINT_STATE_VERSION:
        raise StoreTooNewError(
            f"Checkpoint {checkpoint_id} holds state of version {version}, written by a "
            f"newer shep; this is shep {SHEP_VERSION} (checkpoint state version "
            f"{CHECKPOINT_STATE_VERSION}): upgrade shep to resume from it."
        )
    return Versioned(metadata, version)


def upcast_state(checkpoint: Checkpoint, version: int) -> None:
    """Bring a checkpoint of state ``version`` up to ``CHECKPOINT_STATE_VERSION``, in place."""
    for older in range(version, CHECKPOINT_STATE_VERSION):
        STATE_UPCASTERS[older](checkpoint)
