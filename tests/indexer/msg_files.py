"""Outlook .msg and Word 97 .doc files built byte by byte: a Compound File Binary (CFB, version 3)
writer small enough to read, the MAPI property streams Outlook writes into it ([MS-CFB],
[MS-OXMSG]), and the least a Word binary file needs to be read ([MS-DOC]: a FIB, the text, one
piece in the piece table)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime

SECTOR, MINI, CUTOFF = 512, 64, 4096
FREE, END, FAT_SECTOR, NONE = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF


@dataclass
class Entry:
    """A storage (children) or a stream (data) of a compound file."""

    name: str
    data: bytes | None = None  # None: a storage
    children: list[Entry] = field(default_factory=list)


def _chain(fat: list[int], start: int, count: int) -> None:
    for i in range(count):
        fat[start + i] = start + i + 1 if i < count - 1 else END


def _sectors(data: bytes, size: int) -> int:
    return (len(data) + size - 1) // size


def compound_file(root_children: list[Entry]) -> bytes:
    """The bytes of a CFB file holding `root_children` under its root storage."""
    entries: list[Entry] = [Entry("Root Entry", None, root_children)]
    order = [entries[0]]
    for entry in order:  # breadth first: every entry gets an index
        order.extend(entry.children)
    index = {id(e): i for i, e in enumerate(order)}
    small = [e for e in order if e.data is not None and len(e.data) < CUTOFF]
    big = [e for e in order if e.data is not None and len(e.data) >= CUTOFF]
    mini_stream, mini_fat, mini_start = b"", [], {}
    for entry in small:
        assert entry.data is not None
        count = max(1, _sectors(entry.data, MINI))
        mini_start[id(entry)] = len(mini_fat)
        mini_fat.extend([0] * count)
        _chain(mini_fat, len(mini_fat) - count, count)
        mini_stream += entry.data.ljust(count * MINI, b"\0")
    directory = len(order) * 128
    counts = {
        "dir": _sectors(b"\0" * directory, SECTOR),
        "minifat": _sectors(b"\0" * (4 * len(mini_fat)), SECTOR),
        "ministream": _sectors(mini_stream, SECTOR),
        "big": sum(_sectors(e.data or b"", SECTOR) for e in big),
    }
    body = sum(counts.values())
    fat_count = 1
    while fat_count * 128 < fat_count + body:
        fat_count += 1
    fat = [FREE] * (fat_count * 128)
    for i in range(fat_count):
        fat[i] = FAT_SECTOR
    at = fat_count
    starts = {}
    for part in ("dir", "minifat", "ministream"):
        starts[part] = at if counts[part] else END
        _chain(fat, at, counts[part])
        at += counts[part]
    big_start = {}
    for entry in big:
        count = _sectors(entry.data or b"", SECTOR)
        big_start[id(entry)] = at
        _chain(fat, at, count)
        at += count

    def dir_entry(entry: Entry) -> bytes:
        name = entry.name.encode("utf-16-le") + b"\0\0"
        kind = 5 if entry is order[0] else 1 if entry.data is None else 2
        child = index[id(entry.children[0])] if entry.children else NONE
        if entry is order[0]:
            start, size = starts["ministream"] if mini_stream else END, len(mini_stream)
        elif entry.data is None:
            start, size = 0, 0
        elif len(entry.data) < CUTOFF:
            start, size = mini_start[id(entry)], len(entry.data)
        else:
            start, size = big_start[id(entry)], len(entry.data)
        right = right_of.get(id(entry), NONE)
        return (
            name.ljust(64, b"\0")
            + struct.pack("<HBB", len(name), kind, 1)
            + struct.pack("<III", NONE, right, child)
            + b"\0" * 16 + struct.pack("<I", 0) + b"\0" * 16
            + struct.pack("<IQ", start, size)
        )  # fmt: skip

    right_of = {}  # each child's right sibling: the children as a chain (all black)
    for entry in order:
        for left, right in zip(entry.children, entry.children[1:], strict=False):
            right_of[id(left)] = index[id(right)]
    dir_bytes = b"".join(dir_entry(e) for e in order)
    empty = b"\0" * 64 + struct.pack("<HBB", 0, 0, 0) + struct.pack("<III", NONE, NONE, NONE)
    empty += b"\0" * 36 + struct.pack("<IQ", 0, 0)
    dir_bytes += empty * ((counts["dir"] * SECTOR - len(dir_bytes)) // 128)
    difat = list(range(fat_count)) + [FREE] * (109 - fat_count)
    header = (
        bytes.fromhex("D0CF11E0A1B11AE1") + b"\0" * 16
        + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6) + b"\0" * 6
        + struct.pack("<IIIIIIIII", 0, fat_count, starts["dir"], 0, CUTOFF,
                      starts["minifat"] if mini_fat else END, counts["minifat"], END, 0)
        + struct.pack("<109I", *difat)
    )  # fmt: skip
    mini_fat_bytes = struct.pack(f"<{len(mini_fat)}I", *mini_fat) if mini_fat else b""
    parts = [
        struct.pack(f"<{len(fat)}I", *fat),
        dir_bytes,
        mini_fat_bytes.ljust(counts["minifat"] * SECTOR, b"\xff"),
        mini_stream.ljust(counts["ministream"] * SECTOR, b"\0"),
        *[(e.data or b"").ljust(_sectors(e.data or b"", SECTOR) * SECTOR, b"\0") for e in big],
    ]
    return header + b"".join(parts)


def _text(tag: int, value: str) -> Entry:
    return Entry(f"__substg1.0_{tag:04X}001F", value.encode("utf-16-le"))


def _properties(header: int, when: datetime | None) -> Entry:
    body = b"\0" * header
    if when is not None:  # PR_CLIENT_SUBMIT_TIME, a FILETIME (100 ns since 1601)
        ticks = int((when - datetime(1601, 1, 1, tzinfo=UTC)).total_seconds() * 10_000_000)
        body += struct.pack("<IIQ", 0x00390040, 6, ticks)
    return Entry("__properties_version1.0", body)


def message_entries(
    subject: str,
    sender: str,
    to: str,
    body: str,
    attachments: list[tuple[str, bytes | list[Entry]]],
    when: datetime | None = None,
    embedded: bool = False,
) -> list[Entry]:
    """A message's streams and storages: `attachments` are (file name, bytes) or (file name,
    the entries of an embedded message)."""
    entries = [
        _text(0x0037, subject),
        _text(0x0C1A, sender.split("<")[0].strip()),
        _text(0x0C1F, sender.split("<")[-1].rstrip(">")),
        _text(0x0E04, to),
        _text(0x1000, body),
        _properties(24 if embedded else 32, when),
    ]
    for number, (name, content) in enumerate(attachments):
        parts = [_text(0x3707, name), _properties(8, None)]
        if isinstance(content, bytes):
            parts.append(Entry("__substg1.0_37010102", content))
        else:
            parts.append(Entry("__substg1.0_3701000D", None, content))
        entries.append(Entry(f"__attach_version1.0_#{number:08X}", None, parts))
    return entries


def make_msg(*args: object, **kwargs: object) -> bytes:
    return compound_file(message_entries(*args, **kwargs))  # type: ignore[arg-type]


def make_doc(text: str) -> bytes:
    """A Word 97 .doc holding `text` (each line a paragraph), 8-bit text in one piece."""
    body = (text.replace("\n", "\r") + "\r").encode("cp1252")
    start = 0x400  # the text follows the FIB
    fib = bytearray(start)
    struct.pack_into("<HHHHHH", fib, 0, 0xA5EC, 0x00C1, 0, 0x0409, 0, 0x0200)  # 1Table
    struct.pack_into("<H", fib, 0x0C, 0x00BF)
    struct.pack_into("<II", fib, 0x18, start, start + len(body))  # fcMin, fcMac
    struct.pack_into("<H", fib, 0x20, 14)  # csw
    struct.pack_into("<H", fib, 0x3E, 22)  # cslw
    struct.pack_into("<I", fib, 0x40, start + len(body))  # cbMac
    struct.pack_into("<I", fib, 0x4C, len(body))  # ccpText
    struct.pack_into("<H", fib, 0x98, 93)  # cbRgFcLcb
    # One piece: characters 0..len at byte `start`, compressed (8-bit: fc * 2 | 0x40000000).
    pieces = struct.pack("<II", 0, len(body)) + struct.pack("<HIH", 0, start * 2 | 0x40000000, 0)
    clx = b"\x02" + struct.pack("<I", len(pieces)) + pieces
    struct.pack_into("<II", fib, 0x1A2, 0, len(clx))  # fcClx, lcbClx
    # An empty style sheet (no styles), after the piece table: readers expect one.
    stylesheet = struct.pack("<H", 18) + struct.pack("<HHHHHH", 0, 10, 1, 0, 0, 0) + b"\0" * 6
    struct.pack_into("<II", fib, 0xA2, len(clx), len(stylesheet))  # fcStshf, lcbStshf
    word = (bytes(fib) + body).ljust(CUTOFF, b"\0")
    table = (clx + stylesheet).ljust(CUTOFF, b"\0")
    return compound_file([Entry("WordDocument", word), Entry("1Table", table)])
