from __future__ import annotations

from pathlib import Path

import pytest

from docsearch.errors import ExtractionError
from docsearch.indexer.extract import PAGE_SEPARATOR, Limits, decode_text, extract
from docsearch.indexer.ocr import OcrOptions
from tests.helpers import SAMPLES, bad_folder, make_docx, make_encrypted_pdf, make_pdf


def test_pdf_pages_and_offsets_map_every_character_back(tmp_path: Path) -> None:
    pdf = make_pdf(
        tmp_path / "a.pdf", ["First page text.", "Second page about ISO 13485:2016.", "Third."]
    )
    doc = extract(pdf)
    assert [p.number for p in doc.pages] == [1, 2, 3]
    text = doc.text
    for page in doc.pages:
        assert text[page.char_offset : page.char_offset + len(page.text)] == page.text
    assert doc.page_at(text.index("13485")) == 2
    assert doc.page_at(text.index("Third")) == 3
    assert doc.page_at(doc.pages[1].char_offset - len(PAGE_SEPARATOR)) == 1


def test_pdf_title_from_metadata(tmp_path: Path) -> None:
    doc = extract(make_pdf(tmp_path / "t.pdf", ["Body text"], title="Supply Agreement"))
    assert doc.title == "Supply Agreement"


def test_scanned_pages_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    no_ocr = Limits(ocr=OcrOptions(engine="none"))
    pdf = make_pdf(tmp_path / "s.pdf", ["Typed page.", "", "Another typed page."])
    doc = extract(pdf, limits=no_ocr)
    assert doc.warnings == [
        "pages without a text layer (scanned?): 2; OCR is off (DOCSEARCH_OCR_ENGINE=none); "
        "to OCR it: pip install 'docsearch[ocr]'"
    ]
    assert [p.number for p in doc.pages] == [1, 2, 3]
    with pytest.raises(ExtractionError, match="no text layer"):
        extract(make_pdf(tmp_path / "all.pdf", ["", ""]), limits=no_ocr)


def test_encrypted_pdf_is_refused_with_reason(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError, match="encrypted"):
        extract(make_encrypted_pdf(tmp_path / "e.pdf"))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"   \n\t ", "empty"),
        (bytes(range(256)) * 4, "binary"),
    ],
)
def test_bad_text_files(data: bytes, reason: str) -> None:
    with pytest.raises(ExtractionError, match=reason):
        decode_text(data)


def test_utf8_bom_and_utf16_are_decoded() -> None:
    assert decode_text("\ufeffhello".encode()) == "hello"
    assert decode_text("héllo".encode("utf-16")) == "héllo"
    assert decode_text("caf\xe9".encode("latin-1")) == "café"  # judged, not refused


def test_text_form_feeds_are_pages(tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_text("page one\fpage two\fpage three")
    doc = extract(path)
    assert [p.text for p in doc.pages] == ["page one", "page two", "page three"]


def test_html_headings_become_markdown_and_scripts_vanish(tmp_path: Path) -> None:
    path = tmp_path / "g.html"
    path.write_text(
        "<html><head><title>Guide</title><script>var x=1;</script></head><body>"
        "<h1>Top</h1><div><p>Para <b>one</b>.</p></div><h2>Sub</h2><ul><li>Item</li></ul></body></html>"
    )
    doc = extract(path)
    assert doc.title == "Guide"
    assert doc.text == "# Top\n\nPara one .\n\n## Sub\n\nItem"


def test_docx_heading_styles_become_markdown(tmp_path: Path) -> None:
    path = make_docx(
        tmp_path / "d.docx", [(1, "Agreement"), (0, "Intro."), (2, "1. Scope"), (0, "Body.")]
    )
    doc = extract(path)
    assert doc.text == "# Agreement\n\nIntro.\n\n## 1. Scope\n\nBody."
    with pytest.raises(ExtractionError, match="corrupt DOCX"):
        extract(Path("x.docx"), b"PK not really a zip")


def test_every_bad_file_in_the_bad_folder_has_its_reason(tmp_path: Path) -> None:
    expected = bad_folder(tmp_path / "bad")
    for name, reason in expected.items():
        with pytest.raises(ExtractionError, match=reason):
            extract(tmp_path / "bad" / name)
    assert "warranties" in extract(tmp_path / "bad" / "good.pdf").text


def test_sample_corpus_extracts_with_pages() -> None:
    msa = extract(SAMPLES / "contracts" / "acme-globex-msa.pdf")
    assert len(msa.pages) >= 4
    assert msa.page_at(msa.text.index("7.2 Termination for Cause")) == 3
    manual = extract(SAMPLES / "manuals" / "x200-infusion-pump-service-manual.txt")
    assert manual.page_at(manual.text.index("E-MOT-21")) == 2
