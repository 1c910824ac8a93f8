"""Outlook .msg: a Compound File (OLE2) read with olefile, its MAPI properties as [MS-OXMSG]
lays them out: subject, sender, recipients, body (plain, else HTML) in `__substg1.0_*` streams,
the submit date in `__properties_version1.0`, attachments in `__attach_version1.0_#*`
storages (a file's bytes, or an embedded message's storage, read the same way down to
MAX_DEPTH). The message goes on as an e-mail does (`mail.message_document`).

olefile (pure Python, maintained, the OLE2 reader oletools and extract-msg build on) reads the
container; the property layout is small enough to read here, which spares the several
dependencies of a full .msg library for the four fields, body and attachments docsearch uses.
"""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import describe
from docsearch.indexer.readers.mail import MAX_DEPTH, Attachment, Message, html_text
from docsearch.indexer.readers.office import need

SUBMIT_TIME, DELIVERY_TIME = 0x0039, 0x0E06  # property ids of PT_SYSTIME dates
ATTACHMENT = "__attach_version1.0_#"


def parse_msg(data: bytes) -> Message:
    if not data:
        raise ExtractionError("empty file")
    olefile = need("olefile", "olefile")
    if not data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise ExtractionError("not an Outlook message (no OLE2 header)")
    try:
        ole = olefile.OleFileIO(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - olefile raises several types on broken files
        raise ExtractionError(f"corrupt .msg: {describe(exc)}") from exc
    try:
        marks = ("__substg1.0_0037001F", "__substg1.0_0037001E", "__properties_version1.0")
        if not any(ole.exists(mark) for mark in marks):
            raise ExtractionError("not an Outlook message (no message properties)")
        return _message(ole, "", 0)
    except ExtractionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a stream that does not read as its kind says
        raise ExtractionError(f"corrupt .msg: {describe(exc)}") from exc
    finally:
        ole.close()


def _message(ole: Any, prefix: str, depth: int) -> Message:
    sender_name, sender_mail = _text(ole, prefix, 0x0C1A), _text(ole, prefix, 0x0C1F)
    sender = f"{sender_name} <{sender_mail}>" if sender_name and sender_mail else sender_name
    to = ", ".join(v for v in (_text(ole, prefix, 0x0E04), _text(ole, prefix, 0x0E03)) if v)
    body = _text(ole, prefix, 0x1000)
    if not body.strip():
        html = _text(ole, prefix, 0x1013) or _binary(ole, prefix, 0x1013).decode("utf-8", "replace")
        body = html_text(html) if html.strip() else ""
    header = 24 if prefix else 32  # an embedded message's property stream has a shorter header
    return Message(
        subject=_text(ole, prefix, 0x0037),
        sender=sender or sender_mail,
        to=to,
        date=_date(ole, prefix, header),
        body=body,
        attachments=list(_attachments(ole, prefix, depth)),
    )


def _text(ole: Any, prefix: str, prop: int) -> str:
    """A string property: UTF-16LE (type 001F), else 8-bit (001E, read as Windows-1252)."""
    for kind, codec in (("001F", "utf-16-le"), ("001E", "cp1252")):
        name = f"{prefix}__substg1.0_{prop:04X}{kind}"
        if ole.exists(name):
            text: str = ole.openstream(name).read().decode(codec, "replace")
            return " ".join(text.rstrip("\0").split()) if prop != 0x1000 else text.rstrip("\0")
    return ""


def _binary(ole: Any, prefix: str, prop: int) -> bytes:
    name = f"{prefix}__substg1.0_{prop:04X}0102"
    return ole.openstream(name).read() if ole.exists(name) else b""


def _date(ole: Any, prefix: str, header: int) -> str:
    """The submit (else delivery) time from the property stream, ISO 8601."""
    name = f"{prefix}__properties_version1.0"
    if not ole.exists(name):
        return ""
    raw = ole.openstream(name).read()
    found: dict[int, int] = {}
    for at in range(header, len(raw) - 15, 16):
        tag, _, value = struct.unpack_from("<IIQ", raw, at)
        if tag & 0xFFFF == 0x0040:  # PT_SYSTIME
            found[tag >> 16] = value
    ticks = found.get(SUBMIT_TIME) or found.get(DELIVERY_TIME)
    if not ticks:
        return ""
    try:
        when = datetime(1601, 1, 1, tzinfo=UTC) + timedelta(microseconds=ticks // 10)
    except OverflowError:
        return ""
    return when.isoformat()


def _attachments(ole: Any, prefix: str, depth: int) -> Any:
    storages = sorted(
        {
            "/".join(path[: len(prefix.split("/"))])
            for path in ole.listdir(streams=True, storages=True)
            if "/".join(path).startswith(prefix + ATTACHMENT)
        }
    )
    for number, storage in enumerate(storages, start=1):
        inner = storage + "/"
        name = _text(ole, inner, 0x3707) or _text(ole, inner, 0x3704) or f"attachment-{number}"
        embedded = f"{inner}__substg1.0_3701000D"
        if ole.exists(embedded):
            if depth >= MAX_DEPTH:
                yield Attachment(_as_msg(name), b"")  # refused as nested too deep where read
                continue
            yield Attachment(_as_msg(name), b"", _message(ole, embedded + "/", depth + 1))
            continue
        yield Attachment(name, _binary(ole, inner, 0x3701))


def _as_msg(name: str) -> str:
    return name if name.lower().endswith((".msg", ".eml")) else name + ".msg"
