"""shep: run AI coding agents through LangGraph workflows, with an append-only event log."""

__version__ = "0.1.0"
