"""Text shep did not write (an agent's, a repository's, another person's), made safe to show.

One rule for every face (a terminal, a page, a commit subject), so it lives
in the innermost layer, which every other may import. Such text may hold
escape codes that rewrite a terminal (ESC, CR, NUL, ...) or invisible
characters that reorder or hide what is read (Unicode bidirectional
overrides and isolates, zero-width characters: "Trojan Source"). They are
shown as visible escapes (``\\x1b``, ``\\u202e``) instead of acting.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories that act instead of showing: controls, format characters
#: (bidirectional overrides and isolates, zero-width ones), lone surrogates
#: (undecodable bytes of a path), line and paragraph separators.
_ACTING = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class _Escapes(dict[int, str]):
    """``str.translate``'s table: each code point's shown form, worked out once."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if char == "\n":
            shown = char  # lines stay lines: each one is shown escaped
        elif char == "\t":
            shown = " "  # a tab would misalign the columns it lands in
        elif unicodedata.category(char) not in _ACTING:
            shown = char
        elif code < 0x100:
            shown = f"\\x{code:02x}"
        elif code < 0x10000:
            shown = f"\\u{code:04x}"
        else:
            shown = f"\\U{code:08x}"
        self[code] = shown
        return shown


_ESCAPES = _Escapes()


def printable(text: object) -> str:
    """``text`` with every character that would act on a terminal shown as an escape.

    Newlines are kept, tabs become spaces; ESC is ``\\x1b``, U+202E (right-to-left
    override) is ``\\u202e``, and so on. Printable text comes back unchanged.
    """
    text = str(text)
    if text.isprintable():
        return text
    return text.translate(_ESCAPES)


#: How many hex digits of a run's or an item's id every face shows (a unique prefix is
#: accepted wherever an id is).
SHORT_ID = 8


def short_id(run_id: str) -> str:
    """The id as faces show it: its first ``SHORT_ID`` hex digits."""
    return run_id[:SHORT_ID]
