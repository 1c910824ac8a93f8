"""Plain text and Markdown: read in blocks and decoded as they are read (`decode_stream`), never
whole; form feeds are page breaks. Not here: HTML (`web`), which decodes with `decode_text`."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from pathlib import Path

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import Document, Limits, PageSink, check_size, open_limited
from docsearch.indexer.readers.encoding import judge

BLOCK_BYTES = 4 * 2**20  # a text file is read this much at a time


def decode_text(data: bytes, warnings: list[str] | None = None, encoding: str | None = None) -> str:
    """The text of bytes in memory; see `decode_stream`."""
    return "".join(decode_stream(lambda: iter([data]), warnings, encoding))


def decode_stream(
    blocks: Callable[[], Iterator[bytes]],
    warnings: list[str] | None = None,
    encoding: str | None = None,
) -> Iterator[str]:
    """The text of the bytes `blocks()` gives (called twice: the bytes are judged first, then
    decoded), a block at a time, with newlines made `\\n`.

    `encoding`: the codec to use, or None to judge the bytes (`encoding.judge`: the whole file,
    not its start; empty and binary files refused). NUL bytes in a text file are stray bytes,
    removed with a warning (added to `warnings`) so that the rest of the file is still found;
    bytes the encoding cannot decode are replaced, with a warning saying how many.
    """
    codec = encoding or judge(blocks)
    return _decoded(blocks(), codec, warnings)


def _decoded(blocks: Iterator[bytes], codec: str, warnings: list[str] | None) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder(codec)("replace")
    nuls, replaced, visible, cr = 0, 0, False, ""
    marked_utf16 = codec == "utf-16"  # with a byte order mark
    # U+FFFD written in the file (UTF-8: its three bytes) is text, not a replacement.
    literal = "\ufffd".encode(codec) if codec.startswith("utf-8") else b"\x00\x00\x00\x00"
    for block in _ended(blocks):
        final = not block
        text = decoder.decode(block, final=final)
        replaced += text.count("\ufffd") - block.count(literal)
        if "\x00" in text:
            nuls += text.count("\x00")
            text = text.replace("\x00", "")
        visible = visible or (bool(text) and not text.isspace())
        if marked_utf16:  # as UTF-16 files always were: their line ends as they are
            yield text
            continue
        text, cr = cr + text, ""
        if text.endswith("\r") and not final:  # its \n may start the next block
            text, cr = text[:-1], "\r"
        yield text.replace("\r\n", "\n").replace("\r", "\n")
    if warnings is not None and replaced > 0:
        plural = "s" * (replaced != 1)
        warnings.append(f"read as {codec}: {replaced} undecodable byte{plural} replaced")
    if nuls:
        if warnings is not None:
            warnings.append(f"removed {nuls} NUL byte{'s' * (nuls != 1)} from the text")
        if not visible:
            raise ExtractionError("binary content (only NUL bytes) in a text file")


def _ended(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """The blocks, then b"" (the end)."""
    yield from (block for block in blocks if block)
    yield b""


def extract_text(path: Path, data: bytes, limits: Limits) -> Document:
    return stream_text(path, data, limits, PageSink())


def stream_text(path: Path, source: bytes | None, limits: Limits, sink: PageSink) -> Document:
    """A text file (`source`: its bytes, or None to read it from `path` a block at a time) as
    a Document, written into `sink` as it is decoded."""
    warnings: list[str] = []
    sink.new_page()
    blocks = lambda: _blocks(path, source, limits)  # noqa: E731 - read twice: judged, decoded
    codec = judge(blocks)
    for text in decode_stream(blocks, warnings, codec):
        # Form feeds are page breaks in text exports of paginated documents.
        first, *others = text.split("\f")
        sink.write(first)
        for page in others:
            sink.new_page()
            sink.write(page)
    doc = sink.document(path, "", warnings)
    doc.encoding = codec
    return doc


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
