"""A hostile folder of the office and e-mail formats, indexed by the CLI: exit code, each failure,
wall time and the peak RSS of the whole process tree (the CLI and its extraction child).

    python benchmarks/formats_hostile.py [--folder /tmp/docsearch-formats-hostile]

The folder (built fresh, removed afterwards): one good file of each new format, a corrupt file
of each, a PPTX with a 300 MB zero-filled part (a zip bomb), a 10,000-slide deck, a 1,000,000-cell
sheet, and an e-mail whose messages nest 12 deep. Indexed with the default limits and
`--encoder none` (memory here is the readers', not an encoder's). Results are printed as the
Markdown rows of benchmarks/results/formats_hostile.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.eval_sets import cache_dir  # noqa: E402
from benchmarks.memory import tree_rss  # noqa: E402
from tests.indexer.office_files import make_pptx, many_slides, zip_bomb_like  # noqa: E402
from tests.indexer.test_office_formats import CORRUPT, one_of_each  # noqa: E402


def build(root: Path) -> None:
    from openpyxl import Workbook

    one_of_each(root)
    for name in CORRUPT:
        (root / name).write_bytes(b"PK\x03\x04 not what it claims" * 10)
    zip_bomb_like(root / "deck.pptx", root / "bomb.pptx", "filler.bin", 300 * 2**20)
    scratch = root.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    make_pptx(scratch / "one.pptx", ["A slide about the kestrel."])
    many_slides(scratch / "one.pptx", root / "huge.pptx", 10_000)
    book = Workbook(write_only=True)
    sheet = book.create_sheet("Cells")
    for row in range(100_000):
        sheet.append([f"r{row}c{col}" for col in range(10)])
    book.save(str(root / "million.xlsx"))
    nested = EmailMessage()
    nested["Subject"] = "level 0"
    nested.set_content("the bottom")
    for level in range(1, 13):
        outer = EmailMessage()
        outer["Subject"] = f"level {level}"
        outer.set_content(f"body {level}")
        outer.add_attachment(nested, filename=f"l{level}.eml")
        nested = outer
    (root / "nested.eml").write_bytes(nested.as_bytes())
    shutil.rmtree(scratch)


def run(root: Path) -> dict[str, object]:
    import psutil

    db = tempfile.mkdtemp(prefix="docsearch-formats-db-")
    command = [sys.executable, "-m", "docsearch.app.cli", "index", str(root)]
    command += ["--collection", "c", "--db", db, "--encoder", "none"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    root_proc, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(root_proc))
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    shutil.rmtree(db, ignore_errors=True)
    failed = [line for line in err.decode().splitlines() if ": " in line and "/" in line]
    return {
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak / 2**20),
        "stdout": out.decode()[-400:],
        "stderr_lines": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=cache_dir("formats-hostile"))
    folder = parser.parse_args().folder
    shutil.rmtree(folder, ignore_errors=True)
    root = folder / "docs"
    try:
        build(root)
        sizes = {p.name: p.stat().st_size for p in sorted(root.iterdir())}
        print(json.dumps({"files": sizes, **run(root)}, indent=1))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
