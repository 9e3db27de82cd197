"""The bundled sample repository `shep demo` analyzes."""

from pathlib import Path

SAMPLE_REPO = Path(__file__).with_name("sample_repo")
