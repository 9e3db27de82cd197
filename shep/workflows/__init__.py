"""Registered workflows, by name. Listing them imports no langgraph.

Besides the built-in ones, the modules named in ``SHEP_WORKFLOW_MODULES``
(comma-separated, importable) are imported, and each ``Workflow`` in their
``WORKFLOWS`` sequence is registered: plugins, and the test workflows.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import MappingProxyType

from events.errors import UnknownWorkflowError
from shep.workflows.analyze_repository import ANALYZE_REPOSITORY
from shep.workflows.base import AgentStep, Workflow
from shep.workflows.feature import FEATURE_WORKFLOWS

__all__ = ["WORKFLOWS", "AgentStep", "Workflow", "get_workflow"]


def _plugins() -> list[Workflow]:
    found: list[Workflow] = []
    for name in filter(
        None, (n.strip() for n in os.environ.get("SHEP_WORKFLOW_MODULES", "").split(","))
    ):
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise UnknownWorkflowError(
                f"Cannot import workflow module {name!r} (SHEP_WORKFLOW_MODULES): {e}."
            ) from e
        found.extend(getattr(module, "WORKFLOWS", ()))
    return found


WORKFLOWS: Mapping[str, Workflow] = MappingProxyType(
    {workflow.name: workflow for workflow in (ANALYZE_REPOSITORY, *FEATURE_WORKFLOWS, *_plugins())}
)


def get_workflow(name: str) -> Workflow:
    """The workflow registered under ``name``; the error lists the known ones."""
    try:
        return WORKFLOWS[name]
    except KeyError:
        raise UnknownWorkflowError(
            f"Unknown workflow {name!r}. Known: {', '.join(sorted(WORKFLOWS))} (`shep workflows`)."
        ) from None
