"""OCR of page images: the engines, the choice between them, and a cache of what they read.

Two engines. Tesseract: the `tesseract` program (Debian `tesseract-ocr`, macOS `brew install
tesseract`) through pytesseract. RapidOCR: ONNX models shipped inside the rapidocr-onnxruntime
wheel, so `pip install 'docsearch[ocr]'` alone can read scans. `auto` takes the first installed
in `ENGINES` order, which benchmarks/results/ocr.md measured. What an engine read from a page is
cached under a hash of the page's pixels, the engine and the language, so a page is read once
however often its file is re-indexed, changed elsewhere, renamed or copied.
This runs where extraction runs (the extraction child, under its time limit and memory cap);
after each page it calls the heartbeat that child sets, which also restarts its clock.
Not here: which pages need OCR and how they become images (`extract.py`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from docsearch.errors import ExtractionError

if TYPE_CHECKING:
    from PIL import Image

ENGINES = ("tesseract", "rapidocr")  # auto's order of preference (benchmarks/results/ocr.md)
INSTALL = {
    "tesseract": "apt-get install tesseract-ocr (macOS: brew install tesseract) "
    "and pip install pytesseract",
    "rapidocr": "pip install 'docsearch[ocr]'",
}
RAPIDOCR_LANGS = frozenset(["eng", "chi_sim"])  # what the models in its wheel read
_heartbeat: Callable[[], object] = lambda: None  # noqa: E731 - replaced by the extraction child


@dataclass(frozen=True)
class OcrOptions:
    """How pages without text are read: `engine` auto, tesseract, rapidocr or none (do not
    OCR); `lang` in Tesseract's codes ('eng', 'deu+eng'); `cache_dir` '' keeps no cache."""

    engine: str = "auto"
    lang: str = "eng"
    cache_dir: str = ""


def set_heartbeat(beat: Callable[[], object]) -> None:
    global _heartbeat
    _heartbeat = beat


# ---------------------------------------------------------------------------------------------
# Engines: each reads one grayscale page image in a language


def _tesseract_installed() -> bool:
    try:
        import pytesseract  # noqa: F401
    except ImportError:
        return False
    return shutil.which("tesseract") is not None


def _rapidocr_installed() -> bool:
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except (ImportError, OSError):  # OSError: OpenCV without its system libraries (libGL)
        return False
    return True


@functools.cache
def _tesseract_langs() -> frozenset[str]:
    import pytesseract

    return frozenset(pytesseract.get_languages(config=""))


def _read_tesseract(image: Image.Image, lang: str) -> str:
    import pytesseract

    missing = sorted(set(lang.split("+")) - _tesseract_langs())
    if missing:
        raise ExtractionError(
            f"Tesseract has no language data for {', '.join(missing)}: "
            f"apt-get install {' '.join('tesseract-ocr-' + m.replace('_', '-') for m in missing)}"
        )
    # Tesseract's OpenMP threads cost 5x the CPU for the same page, and take 4x the time on a
    # busy machine (measured in benchmarks/ocr.py); one page at a time is read on one core.
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    return str(pytesseract.image_to_string(image, lang=lang))


@functools.cache
def _rapidocr():  # type: ignore[no-untyped-def]
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR()


def _read_rapidocr(image: Image.Image, lang: str) -> str:
    import numpy as np

    if not set(lang.split("+")) <= RAPIDOCR_LANGS:
        raise ExtractionError(
            f"RapidOCR reads only {', '.join(sorted(RAPIDOCR_LANGS))}, not {lang!r}; "
            f"for other languages: {INSTALL['tesseract']}, and DOCSEARCH_OCR_ENGINE=tesseract"
        )
    lines, _ = _rapidocr()(np.asarray(image.convert("RGB")))
    return "\n".join(line[1] for line in lines or [])  # lines come top to bottom


_INSTALLED = {"tesseract": _tesseract_installed, "rapidocr": _rapidocr_installed}
_READERS = {"tesseract": _read_tesseract, "rapidocr": _read_rapidocr}


def engine_name(options: OcrOptions) -> str | None:
    """The engine that will read pages, or None when none is installed (or OCR is off)."""
    wanted = ENGINES if options.engine == "auto" else (options.engine,)
    return next((e for e in wanted if e in _INSTALLED and _INSTALLED[e]()), None)


def missing_engine(options: OcrOptions) -> str:
    """Why pages cannot be read, with the install line (the reason a scanned file fails with)."""
    if options.engine == "none":
        return f"OCR is off (DOCSEARCH_OCR_ENGINE=none); to OCR it: {INSTALL['rapidocr']}"
    wanted = ENGINES if options.engine == "auto" else (options.engine,)
    lines = " or ".join(INSTALL.get(e, f"(unknown engine {e!r})") for e in wanted)
    return f"no OCR engine is installed; to OCR it: {lines}"


# ---------------------------------------------------------------------------------------------
# Reading pages, through the cache


@dataclass
class PageReader:
    """Reads page images with one engine; counts pages read and pages found in the cache."""

    engine: str
    options: OcrOptions
    read: int = 0
    cached: int = 0

    def text(self, image: Image.Image) -> str:
        gray = image.convert("L")
        path = self._cache_path(gray)
        if path is not None and path.is_file():
            self.cached += 1
            _heartbeat()
            return path.read_text("utf-8")
        text = _READERS[self.engine](gray, self.options.lang).strip()
        self.read += 1
        if path is not None:
            _write_atomically(path, text)
        _heartbeat()
        return text

    def _cache_path(self, gray: Image.Image) -> Path | None:
        if not self.options.cache_dir:
            return None
        digest = hashlib.sha256(f"{self.engine}\0{self.options.lang}\0{gray.size}\0".encode())
        digest.update(gray.tobytes())
        key = digest.hexdigest()
        return Path(self.options.cache_dir) / key[:2] / f"{key}.txt"


def page_reader(options: OcrOptions) -> PageReader | None:
    name = engine_name(options)
    return PageReader(name, options) if name else None


def _write_atomically(path: Path, text: str) -> None:
    """Readers never see half a file; a cache that cannot be written only costs time later."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        partial.write_text(text, "utf-8")
        partial.replace(path)
    except OSError:
        pass
