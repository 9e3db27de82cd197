"""A scripted LLM HTTP server for driving the real agent CLIs offline.

    with FakeLLM() as llm:
        llm.enqueue_tool_call("Write", {"file_path": "/abs/hello.txt", "content": "hi\\n"})
        llm.enqueue_text("Done.")
        ... run the CLI against llm.base_url ...
        assert llm.model_requests[-1].api == "anthropic"

See /work/shared/agent-cli-samples/README.md for how each CLI is pointed at it.
"""

from tests.support.fakellm.script import DEFAULT_TEXT, ErrorReply, Reply, ToolCall
from tests.support.fakellm.server import FakeLLM, RecordedRequest

__all__ = ["DEFAULT_TEXT", "ErrorReply", "FakeLLM", "RecordedRequest", "Reply", "ToolCall"]
