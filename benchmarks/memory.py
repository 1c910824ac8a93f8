"""Peak memory of indexing huge files: a 500 MB text file, a 2,000-page PDF, a 100 MB DOCX.

    python benchmarks/memory.py make [--folder /tmp/docsearch-memory]
    python benchmarks/memory.py run FILE --encoder none [--seconds 3600] [--label txt-none]
    python benchmarks/memory.py report        # benchmarks/results/memory.md from the JSON
    python benchmarks/memory.py clean

`make` builds the inputs from real text (the legal corpora in ../shared/data: Indian Supreme
Court judgments and CUAD contracts), repeated to size: `huge.txt` (500 MB), `huge.pdf` (2,000
A4 pages drawn by reportlab) and `huge.docx` (100 MB: a python-docx document whose body is
written straight into its zip, paragraphs with a heading every 40). `run` indexes one file with
the real CLI (`docsearch index FILE --db ... --encoder ...`) into a fresh database, samples the
RSS of the whole process tree (the CLI, the extraction process, anything they start) every 0.2 s
with psutil, stops it after `--seconds` if it has not finished, and appends the peak, the time,
the samples and the outcome to benchmarks/results/memory.json. Each run takes
/tmp/docsearch-heavy.lock first (the machine is shared), and sets OMP_NUM_THREADS=1.
The huge files need the per-file limits raised: the runs set DOCSEARCH_MAX_FILE_MB and
DOCSEARCH_MAX_TEXT_MB to 2000.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA, cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
# One heavy benchmark at a time on a shared machine: the lock every script's `flock` names.
LOCK = os.environ.get(
    "DOCSEARCH_HEAVY_LOCK", str(Path(tempfile.gettempdir()) / "docsearch-heavy.lock")
)
DEFAULT_FOLDER = cache_dir("memory")
MB = 1_000_000
SAMPLE_SECONDS = 0.2


# ---------------------------------------------------------------------------------------------
# Inputs


def real_texts() -> Iterator[str]:
    """Documents of real legal text, over and over (each pass numbered, so no two are alike)."""
    corpora = [DATA / "irled2017-precedent" / "corpus.jsonl", DATA / "cuad" / "corpus.jsonl"]
    rounds = 0
    while True:
        rounds += 1
        for corpus in corpora:
            with corpus.open() as lines:
                for line in lines:
                    row = json.loads(line)
                    yield f"Document {row['_id']} (copy {rounds})\n\n{row['text']}"


def make_text(path: Path, size: int) -> None:
    with path.open("w") as out:
        written = 0
        for text in real_texts():
            written += out.write(text + "\n\n")
            if written >= size:
                return


def make_pdf(path: Path, pages: int) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4)
    words = (word for text in real_texts() for word in text.split())
    for _ in range(pages):
        y = 800
        for _ in range(52):  # about 12 words a line, 52 lines a page
            pdf.drawString(40, y, " ".join(next(words) for _ in range(12)))
            y -= 15
        pdf.showPage()
    pdf.save()


def make_docx(path: Path, size: int) -> None:
    """A python-docx document whose body is streamed into the zip until it reaches `size`
    bytes compressed (python-docx itself would build the whole tree in memory first)."""
    from xml.sax.saxutils import escape

    import docx

    template = path.with_suffix(".template.docx")
    document = docx.Document()
    document.add_heading("Huge document", level=1)
    document.save(str(template))
    with zipfile.ZipFile(template) as source:
        body = source.read("word/document.xml").decode()
        head, tail = (
            body.split("<w:body>")[0] + "<w:body>",
            "<w:sectPr" + body.split("<w:sectPr")[1],
        )
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
            for info in source.infolist():
                if info.filename != "word/document.xml":
                    out.writestr(info, source.read(info.filename))
            with out.open("word/document.xml", "w", force_zip64=True) as xml:
                xml.write(head.encode())
                for i, text in enumerate(real_texts()):
                    if i % 40 == 0:
                        xml.write(_paragraph(f"Part {i // 40}", "Heading1", escape))
                    for para in text.split("\n"):
                        if para.strip():
                            xml.write(_paragraph(para, "", escape))
                    if i % 200 == 0 and path.stat().st_size >= size:
                        break
                xml.write(tail.encode())
    template.unlink()


_XML_INVALID = dict.fromkeys(c for c in range(32) if c not in (9, 10, 13))


def _paragraph(text: str, style: str, escape: Any) -> bytes:
    text = text.translate(_XML_INVALID)  # control characters are not allowed in XML
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{props}<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>'.encode()


def make(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, build in [
        ("huge.txt", lambda p: make_text(p, 500 * MB)),
        ("huge.pdf", lambda p: make_pdf(p, 2000)),
        ("huge.docx", lambda p: make_docx(p, 100 * MB)),
    ]:
        target = folder / name
        if not target.exists():
            started = time.perf_counter()
            build(target)
            took = time.perf_counter() - started
            print(f"{target}: {target.stat().st_size / MB:.1f} MB in {took:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# Runs


def tree_rss(root: Any) -> int:
    """RSS of a process and all its descendants, in bytes (0 for those gone meanwhile)."""
    import psutil

    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def run(file: Path, encoder: str, seconds: float, label: str) -> dict[str, Any]:
    import psutil

    db = tempfile.mkdtemp(prefix="docsearch-memory-db-")
    command = [sys.executable, "-m", "docsearch.app.cli", "index", str(file)]
    command += ["--collection", "huge", "--db", db, "--encoder", encoder]
    if encoder == "default":
        command = command[:-2]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "DOCSEARCH_MAX_FILE_MB": "2000",
        "DOCSEARCH_MAX_TEXT_MB": "2000",
        "HF_HUB_OFFLINE": "1",
    }
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        root = psutil.Process(proc.pid)
        samples: list[tuple[float, int]] = []
        while proc.poll() is None:
            elapsed = time.perf_counter() - started
            samples.append((round(elapsed, 1), tree_rss(root)))
            if elapsed > seconds:
                for child in root.children(recursive=True):
                    child.kill()
                proc.kill()
                break
            time.sleep(SAMPLE_SECONDS)
        out, err = proc.communicate()
        wall = time.perf_counter() - started
    db_size = sum(f.stat().st_size for f in Path(db).rglob("*") if f.is_file())
    shutil.rmtree(db, ignore_errors=True)
    peak = max((rss for _, rss in samples), default=0)
    result = {
        "label": label,
        "file": file.name,
        "file_mb": round(file.stat().st_size / MB, 1),
        "encoder": encoder,
        "command": " ".join(command),
        "finished": wall <= seconds,
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak / 2**20),
        "rss_by_minute_mb": by_minute(samples),
        "db_mb": round(db_size / MB, 1),
        "stdout_tail": out.decode(errors="replace")[-600:],
        "stderr_tail": err.decode(errors="replace")[-600:],
        "load_average": os.getloadavg(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
    }
    save(result)
    return result


def by_minute(samples: list[tuple[float, int]]) -> list[int]:
    """The peak RSS within each minute of the run, in MiB: whether it plateaued."""
    peaks: dict[int, int] = {}
    for elapsed, rss in samples:
        minute = int(elapsed // 60)
        peaks[minute] = max(peaks.get(minute, 0), rss)
    return [round(peaks[m] / 2**20) for m in sorted(peaks)]


def save(result: dict[str, Any]) -> None:
    path = RESULTS / "memory.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(result)
    path.write_text(json.dumps(runs, indent=1) + "\n")


def report() -> None:
    runs = json.loads((RESULTS / "memory.json").read_text())
    lines = [
        "| run | file | MB | encoder | finished | wall s | peak RSS MiB | peak RSS by minute |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        minutes = " ".join(str(m) for m in r["rss_by_minute_mb"])
        done = "yes" if r["finished"] and r["returncode"] == 0 else f"no (rc {r['returncode']})"
        lines.append(
            f"| {r['label']} | {r['file']} | {r['file_mb']} | {r['encoder']} | {done} | "
            f"{r['wall_s']} | **{r['peak_rss_mb']}** | {minutes} |"
        )
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make")
    made.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    ran = commands.add_parser("run")
    ran.add_argument("file", type=Path)
    ran.add_argument("--encoder", default="none", help="none, or default (MiniLM)")
    ran.add_argument("--seconds", type=float, default=3600)
    ran.add_argument("--label", default="")
    commands.add_parser("report")
    cleaned = commands.add_parser("clean")
    cleaned.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    args = parser.parse_args()
    if args.command == "make":
        make(args.folder)
    elif args.command == "run":
        result = run(args.file, args.encoder, args.seconds, args.label or args.file.name)
        print(json.dumps({k: v for k, v in result.items() if "tail" not in k}, indent=1))
        print(result["stderr_tail"])
    elif args.command == "report":
        report()
    else:
        shutil.rmtree(args.folder, ignore_errors=True)


if __name__ == "__main__":
    main()
