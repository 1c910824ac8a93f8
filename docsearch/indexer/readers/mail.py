"""E-mail: .eml (the standard library's `email`) and Outlook .msg (parsed by `outlook`).

A message is a document (its subject, from, to and date as the first lines, then its body, the
plain text part or else the HTML one) whose attachments are documents of their own, read by the
same readers as any file (`extract.extract` on the attachment's bytes and name): a PDF attached
to a message is searchable with its pages. A message attached to a message (message/rfc822, or
a .eml/.msg file) is read the same way, its attachments too, down to MAX_DEPTH messages. Every
document of the message carries its subject, from, to and date (`MAIL_META`) as filterable
columns; an attachment's `part` names the chain of attachments that leads to it.

An attachment that cannot be read (a type no reader takes, a corrupt file, nested too deep,
beyond MAX_ATTACHMENTS) is skipped with its reason among the message's warnings: the message
and its other attachments are indexed. Not here: the limits on the whole file (`extract`).
"""

from __future__ import annotations

import contextvars
import mimetypes
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import Document, Limits, describe, make_document

if TYPE_CHECKING:
    from email.message import EmailMessage

MAX_DEPTH = 5  # messages inside messages; a deeper one is skipped (a loop of forwards)
MAX_ATTACHMENTS = 500  # documents one file may hold, attachments of attachments included
PART_SEPARATOR = " › "
MAIL_META = ("email_subject", "email_from", "email_to", "email_date")


@dataclass
class _Budget:
    """What one file's messages may still hold: documents, and how deep they go."""

    attachments: int = MAX_ATTACHMENTS
    depth: int = 0


_budget: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("mail", default=None)


@dataclass(frozen=True)
class Attachment:
    """One attachment of a message, as the readers take it: a file name and its bytes, or a
    message already parsed (an Outlook message embedded in another has no bytes of its own)."""

    name: str
    data: bytes
    message: Message | None = None


@dataclass(frozen=True)
class Message:
    """A message as the e-mail readers see it, whichever format it came in."""

    subject: str
    sender: str
    to: str
    date: str  # ISO 8601 where it parsed, else as written
    body: str
    attachments: list[Attachment]

    def meta(self) -> dict[str, str]:
        values = (self.subject, self.sender, self.to, self.date)
        return dict(zip(MAIL_META, (v[:1000] for v in values), strict=True))

    def header(self) -> str:
        named = [("Subject", self.subject), ("From", self.sender), ("To", self.to)]
        named.append(("Date", self.date))
        return "\n".join(f"{name}: {value}" for name, value in named if value)


# How an attachment is read: `extract.extract` (the door hands itself over: readers do not
# import it), called with the attachment's name as its path, its bytes and the limits.
ReadFile = Callable[..., Document]


def extract_eml(path: Path, data: bytes, limits: Limits, read: ReadFile) -> Document:
    return message_document(path, parse_eml(data), limits, read)


def parse_eml(data: bytes) -> Message:
    """A .eml file (RFC 5322 with MIME parts) as a Message."""
    import email
    from email import policy

    if not data.strip():
        raise ExtractionError("empty file")
    message = email.message_from_bytes(data, policy=policy.default)
    if not any(message.keys()):
        raise ExtractionError("not an e-mail message (no header lines)")
    return Message(
        subject=_header(message, "subject"),
        sender=_header(message, "from"),
        to=", ".join(v for v in (_header(message, "to"), _header(message, "cc")) if v),
        date=iso_date(_header(message, "date")),
        body=_body(message),
        attachments=list(_attachments(message)),
    )


def _header(message: object, name: str) -> str:
    try:
        value = message.get(name, "")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a malformed header is read as absent, not fatal
        return ""
    return " ".join(str(value or "").split())


def iso_date(value: str) -> str:
    """An e-mail date as ISO 8601 (sorts and filters as text), or as written if it does not parse."""
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).isoformat() if value else ""
    except (TypeError, ValueError, IndexError):
        return value


def _body(message: EmailMessage) -> str:
    """The message's text: its plain text part, or its HTML part's visible text."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):  # an unknown charset, a broken encoding
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    return html_text(content) if part.get_content_subtype() == "html" else content


def html_text(html: str) -> str:
    from bs4 import BeautifulSoup

    from docsearch.indexer.readers.web import html_blocks

    return "\n\n".join(html_blocks(BeautifulSoup(html, "html.parser")))


def _attachments(message: EmailMessage) -> Iterator[Attachment]:
    for number, part in enumerate(message.iter_attachments(), start=1):
        kind = part.get_content_type()
        if kind == "message/rfc822":
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            data = inner.as_bytes() if hasattr(inner, "as_bytes") else b""
            name = part.get_filename() or f"{_header(inner, 'subject') or 'message'}.eml"
            yield Attachment(_with_suffix(name, ".eml"), data)
            continue
        payload = part.get_payload(decode=True)
        name = part.get_filename() or f"attachment-{number}{mimetypes.guess_extension(kind) or ''}"
        yield Attachment(name, payload if isinstance(payload, bytes) else b"")


def _with_suffix(name: str, suffix: str) -> str:
    return name if name.lower().endswith((".eml", ".msg")) else name + suffix


def message_document(path: Path, message: Message, limits: Limits, read: ReadFile) -> Document:
    """The message's document, its attachments (and theirs) among its `attachments`."""
    text = "\n\n".join(t for t in (message.header(), message.body.strip()) if t)
    doc = make_document(path, message.subject, [text], [])
    doc.meta = message.meta()
    budget = _budget.get()
    token = _budget.set(_Budget()) if budget is None else None
    try:
        _read_attachments(doc, message.attachments, limits, read)
    finally:
        if token is not None:
            _budget.reset(token)
    return doc


def _read_attachments(
    doc: Document, attachments: list[Attachment], limits: Limits, read: ReadFile
) -> None:
    budget = _budget.get()
    assert budget is not None
    names: set[str] = set()
    for attachment in attachments:
        name = _unique(_safe_name(attachment.name), names)
        if budget.attachments <= 0:
            doc.warnings.append(f"attachment {name!r} skipped: over {MAX_ATTACHMENTS} documents")
            continue
        if _is_message(name) and budget.depth >= MAX_DEPTH:
            why = f"messages nested more than {MAX_DEPTH} deep"
            doc.warnings.append(f"attachment {name!r} skipped: {why}")
            continue
        budget.attachments -= 1
        budget.depth += _is_message(name)
        try:
            if attachment.message is not None:
                inner = message_document(Path(name), attachment.message, limits, read)
            else:
                inner = read(Path(name), attachment.data, limits=limits)
        except ExtractionError as exc:
            doc.warnings.append(f"attachment {name!r} skipped: {exc}")
            continue
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - one attachment never fails its message
            doc.warnings.append(f"attachment {name!r} skipped: {describe(exc)}")
            continue
        finally:
            budget.depth -= _is_message(name)
        _adopt(doc, inner, name)


def _adopt(doc: Document, inner: Document, name: str) -> None:
    """Add an attachment's documents to the message's, named by their chain of parts."""
    for one in inner.documents():
        one.part = PART_SEPARATOR.join(p for p in (doc.part, name, one.part) if p)
        one.path = doc.path
        one.meta = one.meta or dict(doc.meta)
        doc.attachments.append(one)
    inner.attachments = []
    doc.warnings.extend(f"{name}: {w}" for w in inner.warnings)
    inner.warnings = []


def _is_message(name: str) -> bool:
    return name.lower().endswith((".eml", ".msg"))


def _safe_name(name: str) -> str:
    """An attachment's file name as shown and stored: its last path component, no controls."""
    name = re.split(r"[\\/]", name)[-1]
    name = "".join(c if c.isprintable() else "?" for c in name).strip()
    return name[:200] or "attachment"


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name (2)`... if a sibling attachment already has it (each is a document)."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        stem, dot, suffix = name.rpartition(".")
        candidate = f"{stem} ({number}).{suffix}" if dot else f"{name} ({number})"
    taken.add(candidate)
    return candidate
