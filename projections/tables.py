"""The names the projections' schema is made of: said once, imported by the light reader
(``projections.state``) and by the schema maker (``projections.schema``) alike.
"""

from __future__ import annotations

#: Names of the projections (their tracking keys) and the tables they own.
PROJECTION_NAMES = ("runs", "logs", "inbox", "decisions", "checkpoints", "features")
PROJECTION_TABLES = (
    "runs",
    "nodes",
    "logs",
    "inbox",
    "inbox_runs",
    "decision_subjects",
    "decisions",
    "checkpoints",
    "checkpoint_writes",
    "features",
    "feature_tasks",
)
#: The projections' secondary indexes (``projections.schema`` checks this against their DDL).
PROJECTION_INDEXES = (
    "runs_status",
    "runs_created",
    "logs_run",
    "inbox_status",
    "inbox_run",
    "inbox_awaited",
    "decisions_run",
    "checkpoints_run",
    "features_branch",
)
#: Each projection's version: bump it whenever the projection's tables change shape or its
#: handlers change what they write. A store whose projection was built by another version
#: has that projection, and only it, rebuilt from the log on its next open (see
#: ``projections.catch_up.migrate``); the others are left as they are.
PROJECTION_VERSIONS = {
    # 2: nodes left running or waiting when a run ends show as stopped.
    "runs": 2,
    # 2: counts in the singular ("1 node", "1 file"); the merge's prepared commit.
    "logs": 2,
    # 2: each artifact says its kind (file, diff, tests).
    # 3: an approved gate's status is "approved" (was "granted"), the word shown everywhere.
    # 4: each item holds its run's workflow and repository (listed without the runs table);
    #    pending items are indexed in the listing's order.
    "inbox": 4,
    # 2: an approved gate's decision is "approved" (was "granted").
    "decisions": 2,
    "checkpoints": 1,
    "features": 1,
}
#: Which version of each projection the store's tables were built by.
VERSIONS_TABLE = "projection_versions"
#: Before projections had versions of their own, one number covered them all; the
#: projections of its last value are those of version 1 above. Its table is left in place
#: for a shep of that time still running during an upgrade.
LEGACY_SCHEMA_TABLE = "projection_schema"
LEGACY_SCHEMA = 7
