"""Builders for real slide decks, spreadsheets, OpenDocument files (written by python-pptx,
openpyxl and odfpy), RTF and EPUB files (written as their specifications lay them out)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path


def make_pptx(path: Path, slides: list[str], notes: str = "") -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for number, text in enumerate(slides, start=1):
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = f"Slide {number}"
        box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(2))
        box.text_frame.text = text
        if notes and number == len(slides):
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))
    return path


def make_xlsx(path: Path, sheets: dict[str, list[list[object]]]) -> Path:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    book.save(str(path))
    return path


def make_odt(path: Path, heading: str, paragraphs: list[str]) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text=heading))
    for paragraph in paragraphs:
        document.text.addElement(P(text=paragraph))
    document.save(str(path))
    return path


def make_ods(path: Path, name: str, rows: list[list[str]]) -> Path:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    table = Table(name=name)
    for values in rows:
        row = TableRow()
        for value in values:
            cell = TableCell(valuetype="string")
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.spreadsheet.addElement(table)
    document.save(str(path))
    return path


def make_odp(path: Path, slides: list[str]) -> Path:
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout
    from odf.text import P

    document = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    for number, text in enumerate(slides, start=1):
        page = Page(name=f"page{number}", masterpagename=master)
        frame = Frame(width="20cm", height="5cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(P(text=text))
        frame.addElement(box)
        page.addElement(frame)
        document.presentation.addElement(page)
    document.save(str(path))
    return path


def make_rtf(path: Path, paragraphs: list[str]) -> Path:
    """RTF as word processors write it: 7-bit, other characters as \\'xx (cp1252) escapes."""

    def escaped(text: str) -> str:
        return "".join(c if ord(c) < 128 else f"\\'{c.encode('cp1252')[0]:02x}" for c in text)

    body = "".join(f"\\pard {escaped(p)}\\par\n" for p in paragraphs)
    path.write_bytes(
        ("{\\rtf1\\ansi\\ansicpg1252\\deff0{\\fonttbl{\\f0 Times;}}\n" + body + "}").encode()
    )
    return path


def make_epub(path: Path, title: str, chapters: list[tuple[str, str]]) -> Path:
    """An EPUB 3: mimetype first and stored, container.xml, a package with a spine."""
    items = "".join(
        f'<item id="c{i}" href="text/c{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in range(len(chapters))
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    package = (
        '<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf" '
        'version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f'<dc:identifier id="id">test</dc:identifier><dc:title>{title}</dc:title>'
        f"<dc:language>en</dc:language></metadata><manifest>{items}</manifest>"
        f"<spine>{spine}</spine></package>"
    )
    container = (
        '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container)
        archive.writestr("OEBPS/content.opf", package, compress_type=zipfile.ZIP_DEFLATED)
        for i, (heading, text) in enumerate(chapters):
            page = (
                '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
                f"<head><title>{heading}</title></head><body><h1>{heading}</h1><p>{text}</p>"
                "</body></html>"
            )
            archive.writestr(f"OEBPS/text/c{i}.xhtml", page, compress_type=zipfile.ZIP_DEFLATED)
    return path


def many_slides(source: Path, target: Path, count: int) -> Path:
    """A deck of `count` copies of `source`'s first slide, its zip parts written directly
    (python-pptx takes minutes to add 10,000 slides one by one)."""
    with zipfile.ZipFile(source) as deck:
        parts = {name: deck.read(name) for name in deck.namelist()}
    slide, rels = parts.pop("ppt/slides/slide1.xml"), parts.pop("ppt/slides/_rels/slide1.xml.rels")
    presentation = parts["ppt/presentation.xml"].decode()
    pres_rels = parts["ppt/_rels/presentation.xml.rels"].decode()
    types = parts["[Content_Types].xml"].decode()
    first = re.search(r'<Relationship [^>]*Target="slides/slide1.xml"[^>]*/>', pres_rels)
    override = re.search(r'<Override PartName="/ppt/slides/slide1.xml"[^>]*/>', types)
    assert first and override
    ids, relations, overrides = [], [], []
    for n in range(1, count + 1):
        parts[f"ppt/slides/slide{n}.xml"] = slide
        parts[f"ppt/slides/_rels/slide{n}.xml.rels"] = rels
        ids.append(f'<p:sldId id="{255 + n}" r:id="rIdS{n}"/>')
        relations.append(
            f'<Relationship Id="rIdS{n}" Type="http://schemas.openxmlformats.org/officeDocument/'
            f'2006/relationships/slide" Target="slides/slide{n}.xml"/>'
        )
        overrides.append(override.group(0).replace("slide1.xml", f"slide{n}.xml"))
    presentation = re.sub(
        r"<p:sldIdLst>.*</p:sldIdLst>", f"<p:sldIdLst>{''.join(ids)}</p:sldIdLst>", presentation
    )
    parts["ppt/presentation.xml"] = presentation.encode()
    parts["ppt/_rels/presentation.xml.rels"] = pres_rels.replace(
        first.group(0), "".join(relations)
    ).encode()
    parts["[Content_Types].xml"] = types.replace(override.group(0), "".join(overrides)).encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as deck:
        for name, data in parts.items():
            deck.writestr(name, data)
    return target


def zip_bomb_like(source: Path, target: Path, member: str, size: int) -> Path:
    """`source` with one more part of `size` zero bytes (a few KB compressed)."""
    with (
        zipfile.ZipFile(source) as original,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        for info in original.infolist():
            out.writestr(info, original.read(info.filename))
        with out.open(member, "w") as handle:
            chunk = b"\0" * 2**20
            for _ in range(size // len(chunk)):
                handle.write(chunk)
    return target
