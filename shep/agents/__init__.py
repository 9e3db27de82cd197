"""The agent execution layer: run agent CLIs as subprocesses, normalize what they say.

``create_executor(agent_type, ...)`` returns an ``AgentExecutor`` for one of the
types in ``AGENT_SPECS``; its ``execute``/``stream`` take an ``AgentOptions`` and
produce an ``AgentResult`` / ``AgentEvent``s, or raise a typed
``events.errors.AgentError``.
"""

from shep.agents.context import embed_context
from shep.agents.model import (
    FEATURES,
    AgentEvent,
    AgentExecutor,
    AgentOptions,
    AgentResult,
    AgentUsage,
    Completed,
    Failed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
    failed_event,
)
from shep.agents.process import ProcessLimits
from shep.agents.registry import AGENT_SPECS, create_executor, get_spec, probe_version
from shep.agents.spec import AgentSpec

__all__ = [
    "AGENT_SPECS",
    "FEATURES",
    "AgentEvent",
    "AgentExecutor",
    "AgentOptions",
    "AgentResult",
    "AgentSpec",
    "AgentUsage",
    "Completed",
    "Failed",
    "ProcessLimits",
    "SessionStarted",
    "TextDelta",
    "ToolResult",
    "ToolUse",
    "create_executor",
    "embed_context",
    "failed_event",
    "get_spec",
    "probe_version",
]
