"""Formats from older systems and courts: RTF (striprtf, pure Python) and legacy Word .doc,
through a real converter the system has: `antiword` (Debian: apt-get install antiword), else
LibreOffice headless (`soffice --convert-to txt`). Without one, a .doc fails with the line that
installs it. A converter runs as a program of its own under the extraction child's time and
memory limits (its address-space cap is inherited), on a temporary copy of the file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from docsearch.errors import ExtractionError
from docsearch.indexer.readers.base import Document, Limits, make_document
from docsearch.indexer.readers.office import need

INSTALL_DOC = "apt-get install antiword (or LibreOffice: apt-get install libreoffice-writer-nogui)"


def extract_rtf(path: Path, data: bytes, limits: Limits) -> Document:
    if not data.strip():
        raise ExtractionError("empty file")
    if not data.lstrip().startswith(b"{\\rtf"):
        raise ExtractionError("not an RTF file (no {\\rtf header)")
    striprtf = need("striprtf.striprtf", "striprtf")
    # RTF is 7-bit: other characters come as \'xx escapes in its code page, or \uN.
    text = striprtf.rtf_to_text(data.decode("latin-1"), errors="replace")
    text = "\n\n".join(block.strip() for block in text.split("\n\n") if block.strip())
    if not text:
        raise ExtractionError("RTF without text")
    return make_document(path, "", [text], [])


def converter() -> list[str] | None:
    """The command that turns a .doc into text on stdout ({} is the file), if one is installed."""
    if antiword := shutil.which("antiword"):
        return [antiword, "-m", "UTF-8.txt", "{}"]
    if soffice := shutil.which("soffice") or shutil.which("libreoffice"):
        return [soffice, "--headless", "--cat", "{}"]
    return None


def extract_doc(path: Path, data: bytes, limits: Limits) -> Document:
    if not data:
        raise ExtractionError("empty file")
    if not data.startswith(b"\xd0\xcf\x11\xe0"):
        raise ExtractionError("not a legacy Word file (no OLE2 header)")
    command = converter()
    if command is None:
        raise ExtractionError(f"reading .doc files needs a converter: {INSTALL_DOC}")
    with tempfile.TemporaryDirectory(prefix="docsearch-doc-") as folder:
        copy = os.path.join(folder, "document.doc")
        with open(copy, "wb") as handle:
            handle.write(data)
        argv = [copy if part == "{}" else part for part in command]
        env = {**os.environ, "HOME": folder}  # LibreOffice writes a profile there
        seconds = limits.seconds or None
        try:
            done = subprocess.run(argv, capture_output=True, timeout=seconds, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise ExtractionError(f"{Path(argv[0]).name} took longer than {seconds:g} s") from None
    text = done.stdout.decode("utf-8", "replace").replace("\r\n", "\n").strip()
    if done.returncode != 0 or not text:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())[:200]
        raise ExtractionError(f"{Path(argv[0]).name} could not read it ({why or 'no text'})")
    return make_document(path, "", [text], [])
