"""Time travel: a run's history as frames, read from the log or from an audit bundle.

Everything here reads; nothing writes. The store is opened read-only in a way
that changes no byte of the database, its WAL or its shared-memory file (see
``sources._open_unchanged``), and checkpoints are decoded with ``ormsgpack`` alone:
importing LangGraph would cost a second and could run code named in the data.

- ``frames``: what a replay shows, a frame per step of the run, with the costly
  parts of each (state diff, snapshot diff stat) made on demand;
- ``builder``: which events tell a run's story, and their fold into frames;
- ``state``: checkpoints decoded without LangGraph, and the state diff between two;
- ``snapshots``: a feature run's worktree snapshots, diffed by git read-only;
- ``sources``: reading a run from the store (read-only) or from an audit bundle;
- ``lineage``: the fork tree around a run.

The names the CLI, the tests and the benchmarks use are re-exported here; the
modules share their imports (msgspec and the event classes), so importing the
package costs what the single module did.
"""

# tests/shep/replay/test_builder.py pins these topics against the event catalog.
from events.catalog import decode_event, topic_of
from shep.replay.builder import (
    STORY_CLASSES,
    OutputBatch,
    Story,
    build_replay,
    load_frames,
)
from shep.replay.frames import (
    Decision,
    Frame,
    Replay,
    ReplayInputError,
    RunSummary,
    fork_command,
    format_ms,
)
from shep.replay.lineage import Lineage, build_lineage, lineage_from_bundle, lineage_from_store
from shep.replay.output import (
    LINE_LIMIT,
    OUTPUT_HEAD,
    OUTPUT_TAIL,
)
from shep.replay.snapshots import snapshot_diff_stat
from shep.replay.sources import (
    BundleError,
    BundleRows,
    frames_from_bundle,
    frames_from_store,
    item_ids,
    read_bundle,
    resolve_run,
    story,
)
from shep.replay.state import (
    DIFF_DEPTH,
    DIFF_LIMIT,
    VALUE_LIMIT,
    StateDiff,
    checkpoint_state,
    decode_typed,
    diff_state,
    short_value,
)

__all__ = [
    "DIFF_DEPTH",
    "DIFF_LIMIT",
    "LINE_LIMIT",
    "OUTPUT_HEAD",
    "OUTPUT_TAIL",
    "STORY_CLASSES",
    "VALUE_LIMIT",
    "BundleError",
    "BundleRows",
    "Decision",
    "Frame",
    "Lineage",
    "OutputBatch",
    "Replay",
    "ReplayInputError",
    "RunSummary",
    "StateDiff",
    "Story",
    "build_lineage",
    "build_replay",
    "checkpoint_state",
    "decode_event",
    "decode_typed",
    "diff_state",
    "fork_command",
    "format_ms",
    "frames_from_bundle",
    "frames_from_store",
    "item_ids",
    "lineage_from_bundle",
    "lineage_from_store",
    "load_frames",
    "read_bundle",
    "resolve_run",
    "short_value",
    "snapshot_diff_stat",
    "story",
    "topic_of",
]
