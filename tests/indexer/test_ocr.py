"""OCR of scanned PDFs and image files, end to end: real scans (text drawn by Pillow), the real
engine that is installed, the real store; and the same folder where OCR cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docsearch.app.cli import app
from docsearch.errors import ExtractionError
from docsearch.indexer.extract import Limits, extract
from docsearch.indexer.ocr import ENGINES, OcrOptions, engine_name
from docsearch.indexer.pipeline import IndexReport
from docsearch.retriever import Retriever
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import index_into, make_pdf, make_scanned_pdf, run_cli, scan_image

if engine_name(OcrOptions()) is None:  # CI installs both engines (.ci/run)
    pytest.skip("no OCR engine installed", allow_module_level=True)

PAGE_2 = "Clause 14. The tenant shall\nrepaint the greenhouse\nevery second winter."


def scans(root: Path) -> Path:
    """A two-page scanned PDF, a scanned PNG, a three-page TIFF and a typed PDF."""
    root.mkdir(parents=True)
    make_scanned_pdf(root / "lease.pdf", ["Clause 1. Rent is due\non the first day.", PAGE_2])
    scan_image("Receipt for the pottery\nkiln repair invoice.").save(root / "receipt.png")
    frames = [scan_image(f"Ledger sheet number {n}\nwalnut orchard.") for n in (1, 2, 3)]
    frames[0].save(root / "ledger.tif", save_all=True, append_images=frames[1:])
    make_pdf(root / "typed.pdf", ["Typed memo about the harbour crane."])
    return root


def test_scanned_pages_are_found_with_their_page_and_marked_ocr(tmp_path: Path) -> None:
    root, db = scans(tmp_path / "scans"), str(tmp_path / "db")
    report = index_into(db, root, options={"max_tokens": 12})
    assert not report.failed and report.new == 4
    assert (report.ocr_pages, report.ocr_read) == (6, 6)
    retriever = Retriever("c", db=db)
    for mode in ("lexical", "hybrid"):
        hit = retriever.search("repaint the greenhouse", mode=mode, k=1)[0]
        assert (Path(hit.path).name, hit.page_start, hit.page_end, hit.ocr) == (
            "lease.pdf",
            2,
            2,
            True,
        ), mode
    assert Path(retriever.search("pottery kiln", mode="lexical")[0].path).name == "receipt.png"
    ledger = retriever.search("ledger sheet number 3", mode="lexical", k=1)[0]
    assert (Path(ledger.path).name, ledger.page_start) == ("ledger.tif", 3)
    typed = retriever.search("harbour crane", mode="lexical", k=1)[0]
    assert not typed.ocr
    shown = CliRunner().invoke(app, ["search", "repaint the greenhouse", "-c", "c", "--db", db])
    assert "p. 2 (OCR)" in shown.stdout
    health = json.loads(CliRunner().invoke(app, ["doctor", "--json", "--db", db]).stdout)
    assert health["collections"]["c"]["ocr_pages"] == {str(root / "lease.pdf"): "1-2"} | {
        str(root / name): pages for name, pages in (("receipt.png", "1"), ("ledger.tif", "1-3"))
    }
    records = {Path(p).name: r for p, r in Store.open(db, "c").file_records().items()}
    assert {name: r.ocr_pages for name, r in records.items()} == {
        "lease.pdf": "1-2",
        "receipt.png": "1",
        "ledger.tif": "1-3",
        "typed.pdf": "",
    }


def test_a_mixed_pdf_ocrs_only_its_scanned_pages(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.append(make_pdf(tmp_path / "typed.pdf", ["Typed cover letter.", ""]))
    writer.append(make_scanned_pdf(tmp_path / "scanned.pdf", [PAGE_2]))
    writer.write(tmp_path / "mixed.pdf")
    doc = extract(tmp_path / "mixed.pdf")
    assert (doc.ocr_pages, doc.ocr_read) == ([2, 3], 2)
    assert doc.pages[0].text == "Typed cover letter."
    assert "repaint the greenhouse" in doc.pages[2].text
    assert doc.warnings == [f"OCR ({engine_name(OcrOptions())}) found no text on pages 2"]


@pytest.mark.parametrize("engine", ENGINES)
def test_each_installed_engine_reads_a_scan(tmp_path: Path, engine: str) -> None:
    if engine_name(OcrOptions(engine=engine)) is None:
        pytest.skip(f"{engine} is not installed")
    scan_image("Invoice for the walnut\nharvest of 2024.").save(tmp_path / "s.png")
    doc = extract(tmp_path / "s.png", limits=Limits(ocr=OcrOptions(engine=engine)))
    assert "walnut" in doc.text and "2024" in doc.text and doc.ocr_pages == [1]


def test_a_language_without_its_data_is_refused_with_the_package_to_install(
    tmp_path: Path,
) -> None:
    scan_image("Invoice.").save(tmp_path / "s.png")
    engine = engine_name(OcrOptions())
    with pytest.raises(ExtractionError, match="tesseract-ocr-xho|reads only"):
        extract(tmp_path / "s.png", limits=Limits(ocr=OcrOptions(engine=str(engine), lang="xho")))


def lexical(db: str, root: Path, name: str = "c") -> IndexReport:
    return index_into(db, root, name, encoder="none", max_tokens=12)


def test_reindexing_scans_reads_every_page_from_the_cache(tmp_path: Path) -> None:
    root, db = scans(tmp_path / "scans"), str(tmp_path / "db")
    assert lexical(db, root).ocr_read == 6
    assert lexical(db, root).unchanged == 4  # not even read
    # A page added to the lease: only that page is read.
    make_scanned_pdf(
        root / "lease.pdf", ["Clause 1. Rent is due\non the first day.", PAGE_2, "Annex"]
    )
    report = lexical(db, root)
    assert (report.changed, report.ocr_pages, report.ocr_read) == (1, 3, 1)
    # A new collection over the same scans extracts every file again, from the cache.
    report = lexical(db, root, "fresh")
    assert (report.new, report.ocr_pages, report.ocr_read) == (4, 7, 0)
    hit = Retriever("fresh", db=db).search("repaint the greenhouse", mode="lexical")[0]
    assert (Path(hit.path).name, hit.page_start, hit.ocr) == ("lease.pdf", 2, True)


def test_without_an_engine_scans_fail_with_the_install_line_and_the_rest_indexes(
    tmp_path: Path,
) -> None:
    root, db = scans(tmp_path / "scans"), str(tmp_path / "db")
    env = {"DOCSEARCH_OCR_ENGINE": "none"}
    done = run_cli("index", str(root), "--encoder", "none", "--db", db, env=env)
    assert done.returncode == 3, done.stderr
    failed = [line for line in done.stderr.splitlines() if line.startswith("failed: ")]
    assert sorted(Path(line.split(": ")[1]).name for line in failed) == [
        "lease.pdf",
        "ledger.tif",
        "receipt.png",
    ]
    assert all("pip install 'docsearch[ocr]'" in line for line in failed)
    assert any("no text layer on any of 2 pages" in line for line in failed)
    records = Store.open(db, "scans").file_records()
    assert [Path(p).name for p, r in records.items() if r.status == "indexed"] == ["typed.pdf"]
    assert Retriever("scans", db=db).search("harbour crane")[0].path.endswith("typed.pdf")


def test_a_collection_from_before_ocr_is_searched_and_written_to(tmp_path: Path) -> None:
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "a.txt").write_text("Walnut orchard lease.")
    lexical(db, root)
    old = Writer(Store.open(db, "c"))  # as an older docsearch wrote it: no OCR columns
    old.chunks.drop_columns(["ocr"])
    old.files_table.drop_columns(["ocr_pages"])
    assert not Retriever("c", db=db).search("walnut", mode="lexical")[0].ocr
    scan_image("Hazel coppice rota.").save(root / "b.png")
    assert lexical(db, root).new == 1
    hit = Retriever("c", db=db).search("hazel coppice", mode="lexical")[0]
    assert (Path(hit.path).name, hit.ocr) == ("b.png", True)
    assert Store.open(db, "c").file_records()[str(root / "a.txt")].ocr_pages == ""


def test_the_extraction_process_works_within_its_memory_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docsearch.indexer import extract_process

    # A child of its own: the suite's shared child may already hold enough freed heap from
    # earlier tests' files to read this one without asking the system for more memory.
    monkeypatch.setattr(extract_process, "_shared", {})
    root, db = tmp_path / "docs", str(tmp_path / "db")
    root.mkdir()
    (root / "a.txt").write_text("Walnut orchard lease. " * 400_000)  # 8.8 MB
    # A cap below what the process already holds: whatever it allocates next fails, and only
    # the file fails; this process (uncapped) goes on and writes the report.
    report = index_into(db, root, encoder="none", extract_memory_mb=1)
    assert [Path(p).name for p, _ in report.failed] == ["a.txt"]
    assert "memory" in report.failed[0][1] or "extraction process" in report.failed[0][1]
    assert lexical(db, root).new == 1  # the default cap leaves room for it
