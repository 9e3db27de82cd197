"""shep: run AI coding agents through LangGraph workflows, with an append-only event log."""

from events.versions import SHEP_VERSION as __version__

__all__ = ["__version__"]
