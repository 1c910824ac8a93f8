"""A small corpus for the UI tests: a PDF with the answer on page 2, Markdown, a broken
PDF, an unsupported file, a symlink that leads out of the indexed folder, and a secret outside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SECRET = "TOP SECRET launch codes 0000"


def make_pdf(path: Path, pages: list[str], title: str = "") -> Path:
    """A real PDF, one text page per string (reportlab)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    if title:
        pdf.setTitle(title)
    for text in pages:
        y = 800
        for line in text.splitlines():
            pdf.drawString(50, y, line)
            y -= 14
        pdf.showPage()
    pdf.save()
    return path


@dataclass
class Corpus:
    db: str
    root: Path  # the allowed indexing root
    docs: Path  # the indexed folder, under root
    secret: Path  # a file outside root
    collection: str = "docs"

    def doc(self, name: str) -> str:
        return str(self.docs / name)


def build_corpus(base: Path) -> Corpus:
    root, outside = base / "root", base / "outside"
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text(f"# Secret\n\n{SECRET}\n")
    make_pdf(
        docs / "policy.pdf",
        [
            "Introduction and scope of this services agreement.",
            "Termination for cause requires written notice of a material breach.\n"
            "The breaching party has thirty days to cure.",
            "Schedule A lists the fees.",
        ],
        title="Services Policy",
    )
    (docs / "notes.md").write_text(
        "# Notes\n\nThe escrow account is reviewed quarterly by the auditor.\n\n"
        "## Invoices\n\nInvoices are payable within sixty days of receipt.\n"
    )
    (docs / "sub" / "swap.md").write_text("# Swap\n\nA harmless memo about parking permits.\n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage \x00\xff" * 4)
    (docs / "data.bin").write_bytes(b"\x00\x01binary")
    (docs / "link-out.md").symlink_to(secret)
    return Corpus(str(base / "db"), root, docs, secret)


def index_corpus(corpus: Corpus, encoder: str = "none", name: str = "docs") -> None:
    from tests.helpers import index_into

    index_into(corpus.db, corpus.docs, name, encoder=encoder)
