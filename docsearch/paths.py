"""File names as the index stores and shows them: valid UTF-8, one line, and reversible.

To the OS a file name is bytes: it may hold bytes that are not UTF-8 (Python gives them as
lone surrogates, U+DC80-U+DCFF, through `os.fsdecode`), newlines, tabs, ESC. Lance strings must
be valid UTF-8 and people read paths in terminals, JSON and web pages, so the index keeps every
path in one escaped form, which is also the form shown everywhere:

- an undecodable byte 0xNN (0x80-0xFF)        -> `\\xNN`
- a control character (C0, DEL)               -> `\\n`, `\\t`, `\\r`, or `\\xNN`
- a C1 control, a line or paragraph separator, a bidirectional override -> `\\uNNNN`
- a backslash                                 -> `\\\\` (so that every escape reads back one way)

Everything else, `/` included, is kept, so a folder's stored form is a prefix of its files'.
`real(stored(p)) == p` for every `p`; `real` gives the name the OS takes (surrogate-escaped).
A name that needs none of this is stored as it is. (A collection indexed before this escape
held names with a backslash or a control character unescaped: the next run finds each such
file under its escaped name, as a rename, reusing its vectors.)
"""

from __future__ import annotations

import re

_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPED = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
# Characters that move a terminal's cursor or reorder what it shows.
_LAYOUT = "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = f"\x00-\x1f\x7f-\x9f\ud800-\udfff{_LAYOUT}"
_NEEDS_ESCAPE = re.compile(f"[\\\\{_UNSAFE}]")
_UNSAFE_CHAR = re.compile(f"[{_UNSAFE}]")
_ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|[nrt\\])")


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def stored(path: str) -> str:
    """The escaped form of `path` (as `os.fsdecode` gives it): what the index keeps and shows."""
    return _NEEDS_ESCAPE.sub(_escape_one, path)


def _unescape_one(match: re.Match[str]) -> str:
    escape = match.group(1)
    if escape in _UNESCAPED:
        return _UNESCAPED[escape]
    code = int(escape[1:], 16)
    if escape[0] == "x" and code >= 0x80:
        return chr(0xDC00 + code)  # an undecodable byte, as os.fsdecode writes it
    return chr(code)


def real(path: str) -> str:
    """The name the OS knows, from its stored form (the inverse of `stored`)."""
    return _ESCAPE.sub(_unescape_one, path) if "\\" in path else path


def one_line(text: str) -> str:
    """Any message (a reason, a warning) made safe to store and print on one line: controls and
    undecodable bytes escaped as in `stored`, backslashes left as they are."""
    return _UNSAFE_CHAR.sub(_escape_one, text)
