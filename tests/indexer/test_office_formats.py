"""One file of each new type (real files from the real libraries), indexed and found by its own
words with its provenance; and the hostile ones: corrupt, zip bombs, a 10,000-slide deck, a
sheet of a million cells, each failing alone with its reason."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path

import pytest

from docsearch.errors import ExtractionError
from docsearch.indexer.extract import Limits, extract
from docsearch.indexer.readers.legacy import converter
from docsearch.retriever import Retriever
from tests.helpers import index_into, run_cli
from tests.indexer.msg_files import make_doc, make_msg
from tests.indexer.office_files import (
    make_epub,
    make_odp,
    make_ods,
    make_odt,
    make_pptx,
    make_rtf,
    make_xlsx,
    many_slides,
    zip_bomb_like,
)


def _sheet_rows() -> list[list[object]]:
    rows: list[list[object]] = [["Item", "Cost"]]
    rows += [[f"line {n}", n * 10] for n in range(2, 251)]
    rows[149] = ["quokka enclosure", 4200]  # row 150
    return rows


def one_of_each(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    make_pptx(root / "deck.pptx", ["Opening remarks.", "The narwhal migration budget.", "Thanks."])
    make_xlsx(root / "budget.xlsx", {"Summary": [["Total", 1]], "Budget": _sheet_rows()})
    make_odt(root / "brief.odt", "Brief", ["The pangolin easement is recorded."])
    make_ods(root / "ledger.ods", "Ledger", [["Account", "Amount"], ["axolotl fund", "17"]])
    make_odp(root / "talk.odp", ["Agenda", "The capybara rollout plan."])
    make_rtf(root / "ruling.rtf", ["The court finds the okapi clause void.", "Résumé follows."])
    make_epub(
        root / "manual.epub",
        "Pump Manual",
        [("Installation", "Mount the bracket."), ("Maintenance", "Replace the tapir filter.")],
    )
    mail = EmailMessage()
    mail["Subject"], mail["From"], mail["To"] = "Site visit", "carol@example.com", "dan@example.com"
    mail.set_content("The ibex survey is attached.")
    (root / "visit.eml").write_bytes(mail.as_bytes())
    message = make_msg(
        "Audit", "Erin <erin@example.com>", "dan@example.com", "The dugong audit.", []
    )
    (root / "audit.msg").write_bytes(message)
    if converter() is not None:  # antiword or LibreOffice: the system's, not pip's
        (root / "old.doc").write_bytes(make_doc("The gibbon tenancy of 1998.\nRent is due."))
    return root


def test_a_folder_of_each_new_type_indexes_and_each_is_found_with_its_provenance(
    tmp_path: Path,
) -> None:
    root, db = one_of_each(tmp_path / "docs"), str(tmp_path / "db")
    result = run_cli("index", str(root), "--db", db, "--collection", "c", "--encoder", "hashing")
    assert result.returncode == 0, result.stderr
    retriever = Retriever("c", db=db)

    def top(query: str):  # type: ignore[no-untyped-def]
        hits = retriever.search(query, k=1, mode="lexical")
        assert hits, query
        return hits[0]

    narwhal = top("narwhal migration")
    assert (Path(narwhal.path).name, narwhal.page) == ("deck.pptx", 2)  # slide 2
    quokka = top("quokka enclosure")
    assert Path(quokka.path).name == "budget.xlsx"
    assert quokka.location == "Budget, rows 101-200" and "Budget, rows 101-200" in quokka.provenance
    assert Path(top("pangolin easement").path).name == "brief.odt"
    axolotl = top("axolotl fund")
    assert (Path(axolotl.path).name, axolotl.location) == ("ledger.ods", "Ledger, rows 1-2")
    capybara = top("capybara rollout")
    assert (Path(capybara.path).name, capybara.page) == ("talk.odp", 2)
    assert Path(top("okapi clause").path).name == "ruling.rtf"
    assert "Résumé" in top("résumé").text
    tapir = top("tapir filter")
    assert (Path(tapir.path).name, tapir.page) == ("manual.epub", 2)  # chapter 2...
    assert tapir.location.endswith("Maintenance")  # ...of a chunk that may start in chapter 1
    ibex = top("ibex survey")
    assert (Path(ibex.path).name, ibex.email_subject) == ("visit.eml", "Site visit")
    if converter() is not None:
        assert Path(top("gibbon tenancy").path).name == "old.doc"
    dugong = top("dugong audit")
    assert (Path(dugong.path).name, dugong.email_from) == ("audit.msg", "Erin <erin@example.com>")
    shown = run_cli("search", "quokka", "--db", db, "--collection", "c", "--mode", "lexical")
    assert "Budget, rows 101-200" in shown.stdout


CORRUPT = {
    "bad.pptx": "corrupt PPTX",
    "bad.xlsx": "corrupt XLSX",
    "bad.odt": "corrupt ODT",
    "bad.ods": "corrupt ODS",
    "bad.odp": "corrupt ODP",
    "bad.epub": "corrupt EPUB",
    "bad.rtf": "not an RTF file",
    "bad.doc": "not a legacy Word file",
    "bad.msg": "not an Outlook message",
}


@pytest.mark.parametrize(("name", "reason"), CORRUPT.items())
def test_a_corrupt_file_of_each_type_fails_with_a_one_line_reason(name: str, reason: str) -> None:
    with pytest.raises(ExtractionError, match=reason) as failure:
        extract(Path(name), b"PK\x03\x04 this is not what it claims" * 10, limits=Limits())
    assert "\n" not in str(failure.value)


def test_a_zip_part_that_unpacks_past_the_limit_is_refused_before_inflating(tmp_path: Path) -> None:
    sources = one_of_each(tmp_path / "src")
    limits = Limits(max_file_mb=4)
    for name in ("deck.pptx", "budget.xlsx", "brief.odt", "manual.epub"):
        bomb = zip_bomb_like(sources / name, tmp_path / f"bomb-{name}", "filler.bin", 8 * 2**20)
        assert bomb.stat().st_size < 100_000
        with pytest.raises(ExtractionError, match="unpacked content is .* over the 4 MB limit"):
            extract(bomb, limits=limits)


def test_a_doc_without_a_converter_names_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no antiword, no soffice
    with pytest.raises(ExtractionError, match="apt-get install antiword"):
        extract(Path("old.doc"), b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 504, limits=Limits())


@pytest.mark.skipif(converter() is None, reason="no .doc converter (antiword, soffice) here")
def test_an_ole2_file_that_is_no_word_document_fails_with_the_converters_reason() -> None:

    outlook = make_msg("not Word", "a <a@x>", "b@x", "body", [])  # OLE2, but a message
    with pytest.raises(ExtractionError, match="could not read it"):
        extract(Path("mislabelled.doc"), outlook, limits=Limits())


@pytest.mark.skipif(converter() is None, reason="no .doc converter (antiword, soffice) here")
def test_a_doc_is_read_through_the_converter(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "old.doc").write_bytes(make_doc("The marmot lease of 1998.\nRent."))
    doc = extract(tmp_path / "docs" / "old.doc", limits=Limits())
    assert "The marmot lease of 1998." in doc.text
    report = index_into(str(tmp_path / "db"), tmp_path / "docs")
    assert not report.failed
    hit = Retriever("c", db=str(tmp_path / "db")).search("marmot", k=1, mode="lexical")[0]
    assert Path(hit.path).name == "old.doc"


@pytest.mark.slow
def test_hostile_folder_fails_each_bad_file_alone(tmp_path: Path) -> None:
    """Corrupt files, zip bombs, a 10,000-slide deck, a sheet of a million cells and messages
    nested in a loop: exit 3, every failure named, everything else indexed."""
    from openpyxl import Workbook

    root = one_of_each(tmp_path / "docs")
    for name in CORRUPT:
        (root / name).write_bytes(b"PK\x03\x04 not what it claims" * 10)
    zip_bomb_like(root / "deck.pptx", root / "bomb.pptx", "filler.bin", 300 * 2**20)
    make_pptx(tmp_path / "one.pptx", ["A slide about the kestrel."])
    many_slides(tmp_path / "one.pptx", root / "huge.pptx", 10_000)
    book = Workbook(write_only=True)
    sheet = book.create_sheet("Cells")
    for row in range(100_000):
        sheet.append([f"r{row}c{col}" for col in range(10)])  # a million cells
    book.save(str(root / "million.xlsx"))
    result = run_cli(
        "index", str(root), "--db", str(tmp_path / "db"), "--collection", "c", "--encoder", "hashing",
        env={"DOCSEARCH_MAX_TEXT_MB": "4"},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    for name in [*CORRUPT, "bomb.pptx", "million.xlsx"]:
        assert name in result.stderr, (name, result.stderr)
    retriever = Retriever("c", db=str(tmp_path / "db"))
    assert Path(retriever.search("kestrel", k=1, mode="lexical")[0].path).name == "huge.pptx"
    assert Path(retriever.search("tapir filter", k=1, mode="lexical")[0].path).name == "manual.epub"


@pytest.mark.parametrize(
    ("name", "module"),
    [("deck.pptx", "pptx"), ("budget.xlsx", "openpyxl"), ("ruling.rtf", "striprtf.striprtf")],
)
def test_a_missing_reader_library_names_its_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, module: str
) -> None:
    import sys

    source = one_of_each(tmp_path / "docs") / name
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: import fails
    with pytest.raises(ExtractionError, match=r"pip install 'docsearch\[office\]'"):
        extract(source, limits=Limits())
