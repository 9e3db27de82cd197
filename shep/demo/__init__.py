"""The bundled sample repository `shep demo` analyzes."""

from pathlib import Path

SAMPLE_REPO = Path(__file__).with_name("sample_repo")

#: Written at the top of every demo answer: nobody may take it for an AI's work.
LABEL = "[demo agent: canned answers, not an AI]"
