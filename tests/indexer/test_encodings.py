"""Text in the encodings offices use: each file indexed, found by a word with a non-ASCII letter,
its encoding recorded and shown by `doctor --json`; binary files still refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docsearch.errors import ExtractionError
from docsearch.indexer.extract import Limits, decode_text, extract
from docsearch.retriever import Retriever
from tests.helpers import index_into, run_cli

FRENCH = (
    "Le locataire paie le loyer chaque mois. La garantie décennale couvre les défauts. "
    "Ça coûte 5 € de plus à la résidence, déjà payé.\n"
)
GERMAN = "Die Kündigung erfolgt schriftlich. Größe der Wohnung: achtzig Quadratmeter.\n"
JAPANESE = "本契約 は 東京 で 締結 された 賃貸借 契約 です。 賃料 は 毎月 支払う。\n"
# name -> (bytes, a word with a non-ASCII letter to find it by, the encoding recorded)
FILES = {
    "windows.txt": (FRENCH.encode("cp1252"), "décennale", "cp1252"),
    "latin1.md": (("# Mietvertrag\n\n" + GERMAN).encode("latin-1"), "Kündigung", "cp1252"),
    "le.txt": (
        GERMAN.replace("Kündigung", "Vermieterkündigung").encode("utf-16-le"),
        "vermieterkündigung",
        "utf-16-le",
    ),
    "be.txt": (
        GERMAN.replace("Größe", "Wohnungsgröße").encode("utf-16-be"),
        "wohnungsgröße",
        "utf-16-be",
    ),
    "sjis.txt": (JAPANESE.encode("shift_jis"), "東京", "cp932"),
    "bad-utf8.md": (
        ("# Rückgabe\n\nDie Rückgabe der Schlüssel erfolgt persönlich. ").encode()
        + b"Stray \xff and \xfe and \x80 bytes. "
        + "Übergabeprotokoll unterschrieben.\n".encode(),
        "Übergabeprotokoll",
        "utf-8",
    ),
}


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, object]:
    root = tmp_path_factory.mktemp("enc") / "docs"
    root.mkdir()
    for name, (data, _, _) in FILES.items():
        (root / name).write_bytes(data)
    (root / "binary.txt").write_bytes(bytes(range(256)) * 8)
    db = str(root.parent / "db")
    return db, root, index_into(db, root)


def test_each_encoding_is_indexed_and_found_by_a_non_ascii_word(
    encoded: tuple[str, Path, object],
) -> None:
    db, root, report = encoded
    assert [Path(p).name for p, _ in report.failed] == ["binary.txt"]  # type: ignore[attr-defined]
    retriever = Retriever("c", db=db)
    for name, (_, word, _) in FILES.items():
        hits = {Path(h.path).name: h for h in retriever.search(word, k=6, mode="lexical")}
        assert name in hits, (name, word, list(hits))
        assert word.lower() in hits[name].text.lower()


def test_a_few_bad_utf8_bytes_are_replaced_with_a_warning_naming_the_file(
    encoded: tuple[str, Path, object],
) -> None:
    _, root, report = encoded
    warnings = [(Path(p).name, w) for p, w in report.warnings]  # type: ignore[attr-defined]
    assert ("bad-utf8.md", "read as utf-8: 3 undecodable bytes replaced") in warnings


def test_doctor_json_shows_each_files_encoding(encoded: tuple[str, Path, object]) -> None:
    db, root, _ = encoded
    result = run_cli("doctor", "--json", "--db", db, "--collection", "c")
    health = json.loads(result.stdout)["collections"]["c"]
    shown = {Path(path).name: codec for path, codec in health["encodings"].items()}
    assert shown == {name: codec for name, (_, _, codec) in FILES.items()}


def test_binary_is_still_refused_and_utf16_without_bom_is_not_binary() -> None:
    with pytest.raises(ExtractionError, match="binary"):
        decode_text(bytes(range(256)) * 8)
    with pytest.raises(ExtractionError, match="binary"):
        decode_text(b"some text " * 100 + b"\0" * 2000)  # NULs on both parities
    assert decode_text("Grüße".encode("utf-16-le")) == "Grüße"


def test_html_without_a_charset_is_detected_and_a_declared_one_is_used(tmp_path: Path) -> None:
    page = "<html><body><h1>Résiliation</h1><p>Le préavis est de trois mois.</p></body></html>"
    plain = tmp_path / "plain.html"
    plain.write_bytes(page.encode("cp1252"))
    doc = extract(plain, limits=Limits())
    assert "préavis" in doc.text and doc.encoding == "cp1252"
    declared = tmp_path / "declared.html"
    head = '<html><head><meta charset="iso-8859-7"></head>'
    declared.write_bytes(
        (head + "<body><p>Σύμβαση μίσθωσης</p></body></html>").encode("iso-8859-7")
    )
    doc = extract(declared, limits=Limits())
    assert "Σύμβαση" in doc.text and doc.encoding == "iso8859-7"


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        ("Umowa najmu: najemca płaci czynsz miesięcznie. Właściciel naprawia.", "cp1250"),
        ("Договор аренды: арендатор платит ежемесячно.", "cp1251"),
        ("caf\xe9", "cp1252"),
    ],
)
def test_other_code_pages_are_not_taken_for_windows_1252(text: str, codec: str) -> None:
    warnings: list[str] = []
    assert decode_text(text.encode(codec), warnings) == text and not warnings
