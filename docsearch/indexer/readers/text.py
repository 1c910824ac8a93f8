"""Plain text and Markdown: read in blocks and decoded as they are read (`decode_stream`), never
whole; form feeds are page breaks. Not here: HTML (`web`), which decodes with `decode_text`."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from pathlib import Path

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import Document, Limits, PageSink, check_size, open_limited

BLOCK_BYTES = 4 * 2**20  # a text file is read this much at a time


def decode_text(data: bytes, warnings: list[str] | None = None) -> str:
    """UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is refused, not guessed.
    See `decode_stream`, which this is for bytes in memory."""
    return "".join(decode_stream(lambda: iter([data]), warnings))


def decode_stream(
    blocks: Callable[[], Iterator[bytes]], warnings: list[str] | None = None
) -> Iterator[str]:
    """The text of the bytes `blocks()` gives (called twice: the bytes are judged first, then
    decoded), a block at a time, with newlines made `\\n`.

    The whole file is judged, not its start: more than 5% control bytes (NUL included) is
    binary content and refused; fewer NULs are stray bytes in a text file, removed with a
    warning (added to `warnings`) so that the rest of the file is still found.
    """
    empty, controls, total, head = True, 0, 0, b""
    for block in blocks():  # C speed: the judging pass costs a read
        head = head or block[:3]
        empty = empty and not block.strip()
        controls += len(block.translate(None, _NOT_CONTROL))
        total += len(block)
    if empty:
        raise ExtractionError("empty file")
    utf16 = head.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not utf16 and controls > 0.05 * total:
        raise ExtractionError("binary content (NUL or control bytes) in a text file")
    return _decoded(blocks(), utf16, warnings)


def _decoded(blocks: Iterator[bytes], utf16: bool, warnings: list[str] | None) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-16" if utf16 else "utf-8")()
    fed, nuls, visible, cr = 0, 0, False, ""
    for block in _without_bom(blocks, utf16):
        if block is None:  # a UTF-8 byte order mark, skipped
            fed += len(codecs.BOM_UTF8)
            continue
        final = not block
        pending = len(decoder.getstate()[0])
        try:
            text = decoder.decode(block, final=final)
        except UnicodeDecodeError as exc:
            if utf16:
                raise
            at = fed - pending + exc.start
            raise ExtractionError(
                f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {at}); "
                "convert the file to UTF-8"
            ) from exc
        fed += len(block)
        if "\x00" in text:
            nuls += text.count("\x00")
            text = text.replace("\x00", "")
        visible = visible or (bool(text) and not text.isspace())
        if utf16:  # as UTF-16 files always were: their line ends as they are
            yield text
            continue
        text, cr = cr + text, ""
        if text.endswith("\r") and not final:  # its \n may start the next block
            text, cr = text[:-1], "\r"
        yield text.replace("\r\n", "\n").replace("\r", "\n")
    if nuls:
        if warnings is not None:
            warnings.append(f"removed {nuls} NUL byte{'s' * (nuls != 1)} from the text")
        if not visible:
            raise ExtractionError("binary content (only NUL bytes) in a text file")


def _without_bom(blocks: Iterator[bytes], utf16: bool) -> Iterator[bytes | None]:
    """The blocks, then b"" (the end); a UTF-8 byte order mark is given as None, then dropped
    (it may come split across the first blocks)."""
    head: bytes | None = None if utf16 else b""  # the start, until a mark can be told
    for block in blocks:
        if head is not None:
            head += block
            if len(head) < len(codecs.BOM_UTF8) and codecs.BOM_UTF8.startswith(head):
                continue  # too few bytes yet to tell
            if head.startswith(codecs.BOM_UTF8):
                yield None
                head = head[len(codecs.BOM_UTF8) :]
            block, head = head, None
        if block:
            yield block
    if head:
        yield head
    yield b""


# Control bytes are those below 0x20 other than tab, newline, form feed and carriage return. In
# UTF-8 they never occur inside a multi-byte character, so counting bytes counts characters.
_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in b"\t\n\f\r")


def extract_text(path: Path, data: bytes, limits: Limits) -> Document:
    return stream_text(path, data, limits, PageSink())


def stream_text(path: Path, source: bytes | None, limits: Limits, sink: PageSink) -> Document:
    """A text file (`source`: its bytes, or None to read it from `path` a block at a time) as
    a Document, written into `sink` as it is decoded."""
    warnings: list[str] = []
    sink.new_page()
    for text in decode_stream(lambda: _blocks(path, source, limits), warnings):
        # Form feeds are page breaks in text exports of paginated documents.
        first, *others = text.split("\f")
        sink.write(first)
        for page in others:
            sink.new_page()
            sink.write(page)
    return sink.document(path, "", warnings)


def _blocks(path: Path, source: bytes | None, limits: Limits) -> Iterator[bytes]:
    """`source` a block at a time, or the file at `path` (refused over a size limit, also if
    it grows past one while it is read)."""
    if source is not None:
        for start in range(0, len(source), BLOCK_BYTES):
            yield source[start : start + BLOCK_BYTES]
        return
    with open_limited(path, limits, text_like=True) as handle:
        read = 0
        while block := handle.read(BLOCK_BYTES):
            read += len(block)
            check_size(path, read, limits, text_like=True)
            yield block
