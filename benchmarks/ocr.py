"""OCR engines compared: character error rate and pages/s on degraded scans of real text.

Pages come from ../shared/data (CUAD contracts and SciFact abstracts): each is laid out as a
letter page of 11 pt serif type, rendered at 150, 200 and 300 dpi, then degraded as a cheap
scanner would: a small skew, blur, sensor noise and JPEG compression. Each installed engine
reads each page as docsearch would (`ocr.PageReader`, no cache). CER is the edit distance
between what it read and the page's text, over the text's length, with runs of whitespace made
one space on both sides. Speed counts reading only (rendering excluded), one page at a time:
pages/s of wall time, and CPU seconds per page (this process and its children, the `tesseract`
program), which a machine shared with other work changes less.

    OMP_NUM_THREADS=2 python benchmarks/ocr.py --pages 4   # -> benchmarks/results/ocr.md/.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import textwrap
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from docsearch.indexer.ocr import ENGINES, OcrOptions, PageReader, engine_name

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf")
DPIS = (150, 200, 300)


def page_texts(count: int, lines: int = 40, width: int = 86) -> list[str]:
    """`count` pages of real text, alternating contracts and abstracts, wrapped as typeset."""
    sources = [DATA / "cuad" / "corpus.jsonl", DATA / "scifact" / "corpus.jsonl"]
    docs = [iter(path.open()) for path in sources]
    pages: list[str] = []
    while len(pages) < count:
        record = json.loads(next(docs[len(pages) % 2]))
        wrapped = textwrap.wrap(" ".join(record["text"].split()), width)
        if len(wrapped) >= 12:  # a page with some body to it
            pages.append("\n".join(wrapped[:lines]))
    return pages


def scan(text: str, dpi: int, rng: random.Random) -> Image.Image:
    """`text` on a letter page at `dpi`, skewed, blurred, noisy and JPEG-compressed."""
    page = Image.new("L", (int(8.5 * dpi), int(11 * dpi)), 255)
    font = ImageFont.truetype(str(FONT), int(11 / 72 * dpi)) if FONT.exists() else None
    ImageDraw.Draw(page).multiline_text(
        (dpi, dpi), text, fill=0, font=font or ImageFont.load_default(int(11 / 72 * dpi)),
        spacing=int(4 / 72 * dpi),
    )  # fmt: skip
    page = page.rotate(rng.uniform(-1.0, 1.0), resample=Image.Resampling.BILINEAR, fillcolor=255)
    page = page.filter(ImageFilter.GaussianBlur(dpi / 300))
    pixels = np.asarray(page, dtype=np.float32)
    noisy = pixels + np.random.default_rng(rng.randrange(2**32)).normal(0, 12, pixels.shape)
    page = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    page.save(buffer, "JPEG", quality=60)
    return Image.open(io.BytesIO(buffer.getvalue()))


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, one row of the table at a time in numpy."""
    target = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    offsets = np.arange(len(b) + 1)
    row = offsets.copy()
    for i, char in enumerate(a, start=1):
        substituted = row[:-1] + (target != ord(char))
        deleted = row[1:] + 1
        new = np.empty_like(row)
        new[0] = i
        new[1:] = np.minimum(substituted, deleted)
        row = np.minimum.accumulate(new - offsets) + offsets  # insertions, left to right
    return int(row[-1])


def cer(truth: str, read: str) -> float:
    truth, read = " ".join(truth.split()), " ".join(read.split())
    return edit_distance(truth, read) / max(1, len(truth))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(engine: str, pages: list[str], seed: int) -> list[dict[str, float]]:
    reader = PageReader(engine, OcrOptions(engine=engine))
    reader.text(Image.new("L", (200, 100), 255))  # models load outside the timing
    rows = []
    for dpi in DPIS:
        rng = random.Random(seed)  # the same degradations for every engine
        images = [scan(text, dpi, rng) for text in pages]
        start, cpu = time.perf_counter(), cpu_seconds()
        read = [reader.text(image) for image in images]
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        errors = [cer(truth, got) for truth, got in zip(pages, read, strict=True)]
        rows.append(
            {
                "engine": engine,
                "dpi": dpi,
                "pages": len(pages),
                "cer_mean": float(np.mean(errors)),
                "cer_max": float(np.max(errors)),
                "pages_per_s": len(pages) / seconds,
                "cpu_s_per_page": cpu / len(pages),
            }
        )
        print(rows[-1], flush=True)
    return rows


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| engine | dpi | pages | CER mean | CER worst | pages/s | CPU s/page |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['engine']} | {r['dpi']} | {r['pages']} | {r['cer_mean']:.2%} | "
        f"{r['cer_max']:.2%} | {r['pages_per_s']:.3f} | {r['cpu_s_per_page']:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4, help="source pages (each at 3 dpi)")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    pages = page_texts(args.pages)
    engines = [e for e in ENGINES if engine_name(OcrOptions(engine=e))]
    rows = [row for engine in engines for row in measure(engine, pages, args.seed)]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ocr.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
