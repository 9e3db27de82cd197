"""The names the projections' schema is made of: said once, imported by the light reader
(``projections.database``) and by the schema maker (``projections.schema``) alike.
"""

from __future__ import annotations

#: Names of the projections (their tracking keys) and the tables they own.
PROJECTION_NAMES = ("runs", "logs", "inbox", "decisions", "checkpoints", "features")
PROJECTION_TABLES = (
    "runs",
    "nodes",
    "logs",
    "inbox",
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
#: Bumped whenever a projection's tables change shape: a store whose projections are of
#: another version has them dropped and rebuilt from the log on its next open.
PROJECTION_SCHEMA = 7
SCHEMA_TABLE = "projection_schema"
