"""Which encoding a text file (plain text, Markdown, HTML without a declared charset) is in.

`judge` reads the file's blocks once, at C speed, and says:
- a byte order mark decides (UTF-8, UTF-16);
- NUL bytes that fall almost all on odd (even) offsets are the high (low) bytes of UTF-16LE (BE)
  text without a mark, judged before the binary rule, which they would fail;
- more than 5% control bytes (NUL included) is binary content, refused;
- valid UTF-8 throughout is UTF-8 (most files: nothing else is looked at);
- otherwise a sample of the file around its non-ASCII bytes decides: at least as many valid
  UTF-8 characters as bytes that are not is UTF-8 with a few bad bytes (the decoder replaces
  them and the file gets a warning; Shift-JIS, EUC-JP or GBK text makes one valid character by
  chance per 4-15 bad bytes); else charset-normalizer (the detector `requests` uses) guesses,
  and Windows-1252 is preferred where its reading is plausible (every non-ASCII character a
  letter or a common sign) and a guess nearly as good reads the same text, or the detector
  knows no language for its best: offices wrote Windows-1252, Latin-1 text reads the same in
  it, and a short French or German text is otherwise often taken for a Baltic or Central
  European code page. (A short Czech text may still be read as Windows-1252.)
Not here: the decoding itself (`text`), a charset an HTML file declares (`web`).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator

from docsearch.errors import ExtractionError

SAMPLE_BYTES = 256 * 1024  # of the file's non-ASCII stretches, what detection looks at
CONTEXT_BYTES = 64  # ASCII kept either side of a non-ASCII stretch in the sample
UTF16_NULS = 0.2  # of all bytes, NULs this many or more may be UTF-16's high bytes...
UTF16_PARITY = 0.9  # ...if this share of them lie on the same parity of offsets
PREFERRED = "cp1252"
PREFERRED_MARGIN = 0.1  # how much more "chaos" (charset-normalizer's score) it may show

# Control bytes are those below 0x20 other than tab, newline, form feed and carriage return. In
# UTF-8 they never occur inside a multi-byte character, so counting bytes counts characters.
NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in b"\t\n\f\r")
_ASCII = bytes(range(128))
_NON_ASCII = re.compile(rb"[\x80-\xff]+")
_ESCAPED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, as surrogateescape gives them


class _Look:
    """What the judging pass counts as the blocks go by."""

    def __init__(self) -> None:
        self.head = b""
        self.empty = True
        self.total = self.controls = 0
        self.nuls = [0, 0]  # NUL bytes at even, odd offsets
        self.utf8: codecs.IncrementalDecoder | None = codecs.getincrementaldecoder("utf-8")()
        self.sample = bytearray()

    def take(self, block: bytes) -> None:
        if len(self.head) < 4:
            self.head += block[: 4 - len(self.head)]
        self.empty = self.empty and not block.strip()
        self.controls += len(block.translate(None, NOT_CONTROL))
        parity = self.total % 2
        self.nuls[parity] += block[::2].count(0)
        self.nuls[1 - parity] += block[1::2].count(0)
        self.total += len(block)
        if self.utf8 is not None:
            try:
                self.utf8.decode(block)
            except UnicodeDecodeError:
                self.utf8 = None
        if len(block.translate(None, _ASCII)) and len(self.sample) < SAMPLE_BYTES:
            self._sample(block)

    def _sample(self, block: bytes) -> None:
        """Add the block's non-ASCII stretches with some ASCII around them (stretches close
        together as one piece: a cut could split a character) to the sample."""
        until = 0  # where the last piece taken from this block ended
        for found in _NON_ASCII.finditer(block):
            if found.end() <= until:
                continue
            room = SAMPLE_BYTES - len(self.sample)
            if room <= 0:
                return
            start = max(until, found.start() - CONTEXT_BYTES)
            if start > until and self.sample:
                self.sample += b"\n"
            until = min(found.end() + CONTEXT_BYTES, len(block), start + room)
            self.sample += block[start:until]

    def valid_utf8(self) -> bool:
        if self.utf8 is None:
            return False
        try:
            self.utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        return True


def judge(blocks: Callable[[], Iterator[bytes]]) -> str:
    """The codec to decode the bytes `blocks()` gives with; ExtractionError for an empty or a
    binary file."""
    look = _Look()
    for block in blocks():
        look.take(block)
    if look.empty:
        raise ExtractionError("empty file")
    if look.head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if look.head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    nuls = sum(look.nuls)
    if look.total >= 4 and nuls >= UTF16_NULS * look.total:
        if look.nuls[1] >= UTF16_PARITY * nuls:
            return "utf-16-le"
        if look.nuls[0] >= UTF16_PARITY * nuls:
            return "utf-16-be"
    if look.controls > 0.05 * look.total:
        raise ExtractionError("binary content (NUL or control bytes) in a text file")
    if look.valid_utf8():
        return "utf-8"
    return guess(bytes(look.sample))


def guess(sample: bytes) -> str:
    """The encoding of bytes that are not all valid UTF-8 (see the module's docstring)."""
    as_utf8 = sample.decode("utf-8", "surrogateescape")
    bad = len(_ESCAPED.findall(as_utf8))
    good = sum(1 for c in as_utf8 if c > "\x7f") - bad
    if good and good >= bad:  # legacy CJK encodings make a valid character per 4-15 bad bytes
        return "utf-8"
    from charset_normalizer import from_bytes

    western = _western(sample)
    # UTF-16 and UTF-32 without a mark were told by their NULs already; a short sample is often
    # taken for them by the detector.
    results = [r for r in from_bytes(sample) if not r.encoding.startswith(("utf_16", "utf_32"))]
    if not results:
        return PREFERRED if western is not None else "utf-8"
    best = results[0]  # best first
    near = [r for r in results if r.chaos <= best.chaos + PREFERRED_MARGIN]
    if western is not None and (best.language == "Unknown" or any(str(r) == western for r in near)):
        return PREFERRED
    return codecs.lookup(best.encoding).name


# What Western European text holds besides letters: cp1252's punctuation and signs.
_WESTERN_SIGNS = frozenset("€‚„…†‡‰‹›‘’“”•–—˜™«»°§©®±·¿¡£¥¢\xa0")


def _western(sample: bytes) -> str | None:
    """The sample as the preferred encoding reads it, if that reading is plausible: every
    non-ASCII character a letter or a common sign (Polish in cp1250 read so gives '³' for 'ł';
    Shift-JIS gives undefined bytes or signs such as '¤'); else None."""
    try:
        text = sample.decode(PREFERRED)
    except UnicodeDecodeError:
        return None
    plausible = all(c.isalpha() or c in _WESTERN_SIGNS for c in text if c > "\x7f")
    return text if plausible else None


def declared_charset(head: bytes) -> str | None:
    """The charset an HTML or XML file declares in its first bytes (a known codec), if any."""
    found = re.search(rb"""(?:charset|encoding)\s*=\s*["']?([A-Za-z0-9_.:-]{1,40})""", head)
    if found is None:
        return None
    try:
        return codecs.lookup(found.group(1).decode("ascii")).name
    except LookupError:
        return None
