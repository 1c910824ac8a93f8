"""E-mail (.eml) with attachments: each attachment a document of its own, read by the same
readers, named by its message; deleting or editing the message takes all of them along. Real
messages written by the standard library's `email`, real PDFs (reportlab) and DOCX (python-docx)."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest

from docsearch.indexer.extract import Limits, extract
from docsearch.indexer.readers.mail import MAX_DEPTH
from docsearch.retriever import Retriever
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import index_into, make_docx, make_pdf

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def message(subject: str, body: str, attachments: list[tuple[str, bytes, str]]) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"] = subject
    mail["From"] = "Alice Archer <alice@example.com>"
    mail["To"] = "bob@example.com"
    mail["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    mail.set_content(body)
    for name, data, kind in attachments:
        if isinstance(data, EmailMessage):
            mail.add_attachment(data, filename=name)
            continue
        maintype, subtype = kind.split("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return mail


def lease_mail(folder: Path, schedule_words: str = "Quarterly walrus inventory.") -> bytes:
    pdf = make_pdf(folder / "lease.tmp", ["Cover page of the lease.", "Tenant pays the escrow."])
    docx = make_docx(folder / "schedule.tmp", [(1, "Schedule"), (0, schedule_words)])
    mail = message(
        "Lease documents",
        "Please find the lease attached. The saxophone stays.",
        [
            ("lease.pdf", pdf.read_bytes(), PDF),
            ("schedule.docx", docx.read_bytes(), DOCX),
            ("photos.zip", b"PK\x03\x04 not read", "application/zip"),
        ],
    )
    pdf.unlink()
    docx.unlink()
    return mail.as_bytes()


def _search(db: str, query: str) -> list:  # type: ignore[type-arg]
    return Retriever("c", db=db).search(query, k=5, mode="lexical")


def test_an_eml_with_a_pdf_and_a_docx_attached_gives_three_documents(tmp_path: Path) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "mail.eml").write_bytes(lease_mail(tmp_path))
    report = index_into(db, root)
    assert not report.failed and report.new == 1
    skipped = [w for _, w in report.warnings]
    assert any("'photos.zip' skipped: unsupported file type '.zip'" in w for w in skipped)
    docs = Writer(Store.open(db, "c")).docs.to_arrow().to_pylist()
    assert sorted(d["title"] for d in docs) == ["Lease documents", "Schedule", "untitled"]
    assert {d["path"] for d in docs} == {str(root / "mail.eml")}

    escrow = _search(db, "escrow")[0]
    assert (escrow.part, escrow.page, escrow.path) == ("lease.pdf", 2, str(root / "mail.eml"))
    assert escrow.email_subject == "Lease documents"
    assert escrow.email_from == "Alice Archer <alice@example.com>"
    assert escrow.email_date == "2026-12-01T10:00:00+00:00"
    assert "attachment lease.pdf" in escrow.provenance and "Lease documents" in escrow.provenance
    assert escrow.as_dict()["part"] == "lease.pdf"
    from docsearch.app.web.actions import hit_html

    shown = hit_html(1, escrow, "c", str(root))  # the UI names the message it came in
    assert "attachment lease.pdf · e-mail &#x27;Lease documents&#x27; from Alice" in shown
    assert _search(db, "walrus")[0].part == "schedule.docx"
    body = _search(db, "saxophone")[0]
    assert body.part == "" and body.title == "Lease documents"

    # The e-mail's columns filter every document it holds, attachments too.
    found = Retriever("c", db=db).search(
        "escrow walrus saxophone", k=5, mode="lexical", where="email_from LIKE '%alice%'"
    )
    assert {h.part for h in found} == {"", "lease.pdf", "schedule.docx"}
    assert not Retriever("c", db=db).search("escrow", mode="lexical", where="email_to = 'x'")


def test_editing_the_eml_reindexes_all_its_documents_and_deleting_removes_them(
    tmp_path: Path,
) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    mail = root / "mail.eml"
    mail.write_bytes(lease_mail(tmp_path))
    index_into(db, root)
    mail.write_bytes(lease_mail(tmp_path, "Annual lighthouse survey."))
    report = index_into(db, root)
    assert report.changed == 1
    store = Store.open(db, "c")
    assert Writer(store).docs.count_rows() == 3
    assert not _search(db, "walrus")
    assert _search(db, "lighthouse")[0].part == "schedule.docx"
    assert _search(db, "escrow")[0].part == "lease.pdf"

    mail.unlink()
    assert index_into(db, root).deleted == 1
    store = Store.open(db, "c")
    assert Writer(store).docs.count_rows() == 0 and store.count_chunks() == 0


def test_nested_messages_are_read_with_their_attachments_down_to_a_depth(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "inner.pdf", ["The gazebo warranty runs ten years."]).read_bytes()
    inner = message("Forwarded warranty", "See the warranty.", [("warranty.pdf", pdf, PDF)])
    outer = message("Fwd: warranty", "Forwarding this.", [("fwd.eml", inner, "message/rfc822")])
    doc = extract(Path("outer.eml"), outer.as_bytes(), limits=Limits())
    parts = {d.part: d for d in doc.documents()}
    assert set(parts) == {"", "fwd.eml", "fwd.eml › warranty.pdf"}
    assert "gazebo" in parts["fwd.eml › warranty.pdf"].text
    assert parts["fwd.eml › warranty.pdf"].meta["email_subject"] == "Forwarded warranty"

    deep = message("level 0", "the bottom", [])
    for level in range(1, MAX_DEPTH + 4):  # a loop of forwards, deeper than read
        deep = message(
            f"level {level}", f"body {level}", [(f"l{level}.eml", deep, "message/rfc822")]
        )
    doc = extract(Path("deep.eml"), deep.as_bytes(), limits=Limits())
    assert len(doc.attachments) == MAX_DEPTH
    assert any(f"nested more than {MAX_DEPTH} deep" in w for w in doc.warnings)


def test_a_corrupt_attachment_is_skipped_with_its_reason_and_the_rest_indexed(
    tmp_path: Path,
) -> None:
    bad = message(
        "Broken",
        "The quince orchard report follows.",
        [
            ("report.pdf", b"%PDF-1.7 garbage\x00\xff" * 3, PDF),
            ("notes.txt", b"Plum notes.", "text/plain"),
        ],
    )
    doc = extract(Path("m.eml"), bad.as_bytes(), limits=Limits())
    assert [d.part for d in doc.attachments] == ["notes.txt"]
    assert any("'report.pdf' skipped: corrupt PDF" in w for w in doc.warnings)


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"", "empty file"), (b"\x00\x01\x02 just bytes", "not an e-mail")],
)
def test_a_file_that_is_no_message_fails_alone(data: bytes, reason: str) -> None:
    from docsearch.errors import ExtractionError

    with pytest.raises(ExtractionError, match=reason):
        extract(Path("x.eml"), data, limits=Limits())


def test_the_preview_of_an_attachment_hit_shows_the_attachments_text(tmp_path: Path) -> None:
    from docsearch.app.web.actions import _extracted
    from docsearch.app.web.files import Verified

    data = lease_mail(tmp_path)
    verified = Verified(str(tmp_path / "mail.eml"), data)
    assert "escrow" in _extracted(verified, "lease.pdf").text
    assert "saxophone" in _extracted(verified, "").text


def test_an_outlook_msg_with_a_pdf_attached_is_indexed_with_its_parent(tmp_path: Path) -> None:
    """The .msg is built byte by byte (a compound file, MAPI property streams)."""
    from datetime import UTC, datetime

    from tests.indexer.msg_files import make_msg, message_entries

    pdf = make_pdf(tmp_path / "p.pdf", ["Cover.", "The lessee shall insure the warehouse."])
    inner = message_entries(
        "Earlier thread", "Eve <eve@example.com>", "bob@example.com", "The ocelot clause.",
        [("note.txt", b"A marmoset addendum.")], embedded=True,
    )  # fmt: skip
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "outlook.msg").write_bytes(
        make_msg(
            "Warehouse lease", "Alice Archer <alice@example.com>", "bob@example.com",
            "Signed copy attached; the flamingo stays.",
            [("lease.pdf", pdf.read_bytes()), ("thread.msg", inner), ("x.bin", b"\0\1\2")],
            when=datetime(2026, 11, 30, 9, 30, tzinfo=UTC),
        )
    )  # fmt: skip
    report = index_into(db, root)
    assert not report.failed
    assert any("'x.bin' skipped: unsupported file type" in w for _, w in report.warnings)
    insure = _search(db, "insure warehouse")[0]
    assert (insure.part, insure.page, insure.email_subject) == ("lease.pdf", 2, "Warehouse lease")
    assert insure.email_date == "2026-11-30T09:30:00+00:00"
    assert insure.email_from == "Alice Archer <alice@example.com>"
    assert _search(db, "flamingo")[0].part == ""
    assert _search(db, "ocelot")[0].email_subject == "Earlier thread"
    assert _search(db, "marmoset")[0].part == "thread.msg › note.txt"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "corrupt .msg"),
        (b"From: someone\n\nnot OLE2", "not an Outlook message"),
    ],
)
def test_a_corrupt_msg_fails_alone_with_a_reason(data: bytes, reason: str) -> None:
    from docsearch.errors import ExtractionError

    with pytest.raises(ExtractionError, match=reason):
        extract(Path("x.msg"), data, limits=Limits())


def test_embedded_msgs_nested_past_the_depth_are_skipped(tmp_path: Path) -> None:
    from tests.indexer.msg_files import make_msg, message_entries

    nested = message_entries("level 0", "a <a@x>", "b@x", "bottom", [], embedded=True)
    for level in range(1, MAX_DEPTH + 3):
        nested = message_entries(f"level {level}", "a <a@x>", "b@x", f"body {level}",
                                 [(f"l{level}.msg", nested)], embedded=True)  # fmt: skip
    data = make_msg("top", "a <a@x>", "b@x", "top body", [("l.msg", nested)])
    doc = extract(Path("deep.msg"), data, limits=Limits())
    assert len(doc.attachments) == MAX_DEPTH
    assert any(f"nested more than {MAX_DEPTH} deep" in w for w in doc.warnings)


def test_a_message_streamed_in_groups_keeps_one_document_row_per_document(tmp_path: Path) -> None:
    """More chunks than a commit group: the file is written a group at a time (StreamedFile),
    each of its documents still gets its own row."""
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "mail.eml").write_bytes(lease_mail(tmp_path))
    index_into(db, root, options={"max_tokens": 8}, commit_chunks=2)
    store = Store.open(db, "c")
    assert store.count_chunks() > 6
    rows = Writer(store).docs.to_arrow().to_pylist()
    assert sorted(r["title"] for r in rows) == ["Lease documents", "Schedule", "untitled"]
    by_doc = {r["doc_id"]: r["n_chunks"] for r in rows}
    for doc_id, count in by_doc.items():
        assert store.count_chunks(f"doc_id = '{doc_id}'") == count
    assert _search(db, "escrow")[0].part == "lease.pdf"
