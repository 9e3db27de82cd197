"""The supervisor: policies that answer questions and approve gates, recorded as evidence.

``evaluate`` (the LangGraph evaluation of one item), ``guardrails`` (the
deterministic rules and their metrics), ``prompt`` (the versioned prompt and
its fence), ``process`` (following the log), ``start`` (starting it in the
background), ``agent`` (the evaluator through the executor port).
"""
