"""Registered workflows, by name. Listing them imports no langgraph."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from shep.errors import ShepError
from shep.workflows.analyze_repository import ANALYZE_REPOSITORY
from shep.workflows.base import AgentStep, Workflow

__all__ = ["WORKFLOWS", "AgentStep", "Workflow", "get_workflow"]

WORKFLOWS: Mapping[str, Workflow] = MappingProxyType(
    {workflow.name: workflow for workflow in (ANALYZE_REPOSITORY,)}
)


class UnknownWorkflowError(ShepError):
    exit_code = 2


def get_workflow(name: str) -> Workflow:
    """The workflow registered under ``name``; the error lists the known ones."""
    try:
        return WORKFLOWS[name]
    except KeyError:
        raise UnknownWorkflowError(
            f"Unknown workflow {name!r}. Known: {', '.join(sorted(WORKFLOWS))} (`shep workflows`)."
        ) from None
