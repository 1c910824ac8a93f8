"""Regenerate the binary files of the bundled sample corpus from their Markdown sources.

    python scripts/make_samples.py

Writes docsearch/corpora/samples/contracts/acme-globex-msa.pdf (a multi-page PDF with a text
layer, made with reportlab) and .../umbrella-supply-agreement.docx (python-docx, real heading
styles). The sources in scripts/sample_sources/ were written for this project.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "scripts" / "sample_sources"
SAMPLES = ROOT / "docsearch" / "corpora" / "samples"


def blocks(markdown: str) -> list[tuple[int, str]]:
    """(heading level or 0, text) for each blank-line separated block."""
    out = []
    for block in re.split(r"\n\s*\n", markdown.strip()):
        match = re.match(r"^(#+)\s+(.*)$", block.strip())
        out.append((len(match.group(1)), match.group(2)) if match else (0, " ".join(block.split())))
    return out


def make_pdf(source: Path, target: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer

    styles = getSampleStyleSheet()
    story: list = []
    for level, text in blocks(source.read_text()):
        if level == 2 and text.startswith(("ARTICLE 7", "ARTICLE 10", "SCHEDULE")):
            story.append(PageBreak())  # a few deliberate page breaks: clauses land on known pages
        style = {1: styles["Title"], 2: styles["Heading2"]}.get(level, styles["BodyText"])
        story += [Paragraph(escape(text), style), Spacer(1, 4)]
    title = blocks(source.read_text())[0][1].title()
    doc = SimpleDocTemplate(str(target), pagesize=A4, title=title, author="docsearch samples")
    doc.build(story)


def make_docx(source: Path, target: Path) -> None:
    import docx

    document = docx.Document()
    for level, text in blocks(source.read_text()):
        if level:
            document.add_heading(text, level=level)
        else:
            document.add_paragraph(text)
    document.core_properties.title = blocks(source.read_text())[0][1]
    document.save(str(target))


if __name__ == "__main__":
    make_pdf(SOURCES / "acme-globex-msa.md", SAMPLES / "contracts" / "acme-globex-msa.pdf")
    make_docx(
        SOURCES / "umbrella-supply-agreement.md",
        SAMPLES / "contracts" / "umbrella-supply-agreement.docx",
    )
    print(f"wrote samples under {SAMPLES}")
