"""Indexing throughput and search latency of docsearch next to what users would pick instead.

    python benchmarks/peers.py [--tools docsearch,llamaindex,txtai,fastembed,hand] [--rounds 3]
        [--contracts 40] [--docsearch-python PATH] [--docsearch-path DIR] [--venv DIR]
        [--threads 2] [--queries 30] [--no-search] [--out benchmarks/results] [--name peers]
        [--docsearch-option precision=fp32]

Writes benchmarks/results/peers.{json,md}. The same folder (the first `--contracts` CUAD
contracts of ../shared/data/cuad as .txt, plus docsearch's bundled samples: PDF, DOCX, HTML, MD,
TXT) is indexed by each tool into a fresh database, in interleaved rounds (the order rotates each
round so no tool always runs first on a cold page cache), with the same local MiniLM folder and
the same torch thread count. Tools:
- `docsearch`: the `docsearch index` CLI, run by `--docsearch-python` with `--docsearch-path` on
  PYTHONPATH, so the same script measures a worktree before and after a change;
- `llamaindex`: SimpleDirectoryReader + SentenceSplitter + HuggingFaceEmbedding + LanceDB store;
- `txtai`: Embeddings(content=True, hybrid=True), fed 254-token windows (it has no chunker);
- `fastembed`: Qdrant's ONNX Runtime embedder (what speed-minded users pick) on the same MiniLM,
  exported to ONNX once before the rounds (`export_onnx`: transformers' BertModel, its
  last_hidden_state; fastembed mean-pools and normalises, as MiniLM does) and loaded from that
  folder (`specific_model_path`: it cannot download); 254-token windows, batch 32, stored like
  `hand` (a LanceDB table + FTS): fastembed embeds only;
- `hand`: 254-token windows, SentenceTransformer.encode(batch_size=32), a LanceDB table + FTS;
- `hand-bf16`: the same with the model in bfloat16 (opt-in: very slow without bf16 hardware).
The peers run in their own virtual environment (`--venv`, created with pinned versions on first
use and reused after), never with docsearch's dependencies. Every run is a fresh process: wall
time includes imports and model load, which users pay too. Measured per run: wall seconds,
tokens/s (the folder's MiniLM token count, counted once, over wall time), chunks, peak RSS and
PSS of the whole process tree (sampled), CPU seconds, 1-minute load average before and after.
Search: after the rounds, each tool's last index is opened in a fresh process and asked short
(2-5 word) and long (~200 word) queries; p50/p95 per query, model load excluded.
Notes written under the NOTES marker in peers.md survive a re-run; `peers.py render` rewrites
peers.md from peers.json without running anything.
Not here: retrieval quality (benchmarks/quality.py), docsearch's own speed targets (speed.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # `python benchmarks/x.py`: the checkout
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.eval_sets import DATA, cache_dir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "docsearch" / "corpora" / "samples"
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_VENV = cache_dir("peers-venv")
MINILM = "all-MiniLM-L6-v2"
COLLECTION = "peers"
WINDOW = 254  # MiniLM's 256-token window less [CLS] and [SEP]
HAND_BATCH = 32
NOTES = "<!-- NOTES: text below this line is kept when the script rewrites the file -->"
TOOLS = ("docsearch", "llamaindex", "txtai", "fastembed", "hand", "hand-bf16")
DEFAULT_TOOLS = ("docsearch", "llamaindex", "txtai", "fastembed", "hand")
PEERS = ("llamaindex", "txtai", "fastembed")  # the libraries a user would pick instead
# The files fastembed reads beside the ONNX graph (the tokenizer and its settings).
FASTEMBED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
)
FASTEMBED_NAME = "local/all-MiniLM-L6-v2"
# The same releases as docsearch's own environment, so the comparison is not one of versions;
# torch is the CPU build (an unpinned torch pulls the CUDA one).
PINS = (
    "torch==2.13.0+cpu",
    "transformers==5.24.0",
    "sentence-transformers==6.2.0",
    "tokenizers==0.23.3",
    "lancedb==0.40.0",
    "pyarrow==26.0.1",
    "numpy==2.4.6",
    "llama-index-core",
    "llama-index-embeddings-huggingface",
    "llama-index-vector-stores-lancedb",
    "llama-index-readers-file",
    "txtai",
    "fastembed",
    "onnx",  # fastembed's MiniLM is exported here (torch's exporter writes through it)
    "faiss-cpu",
    "pypdf",
    "docx2txt",
)
SHORT_QUERIES = (
    "termination for cause",
    "governing law",
    "indemnification obligations",
    "limitation of liability",
    "confidential information",
    "exclusivity",
    "non-compete clause",
    "assignment without consent",
    "insurance requirements",
    "audit rights",
    "most favored nation",
    "renewal term",
    "intellectual property ownership",
    "warranty disclaimer",
    "force majeure",
    "payment terms net 30",
    "change of control",
    "minimum purchase commitment",
    "liquidated damages",
    "source code escrow",
    "infusion pump maintenance",
    "blood pressure target",
    "mutual non-disclosure",
    "supply agreement price adjustment",
    "revenue sharing",
    "covenant not to sue",
    "third party beneficiary",
    "license grant",
    "anti-assignment",
    "post-termination services",
)


# ---------------------------------------------------------------- the folder and the model


def build_folder(dest: Path, contracts: int, data: Path = DATA, samples: Path = SAMPLES) -> int:
    """Write the benchmark folder: `contracts` CUAD contracts as .txt plus the samples tree.

    The contracts are the first lines of corpus.jsonl, written as speed.py writes them, so both
    benchmarks index the same text. Returns the number of files.
    """
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    with (data / "cuad" / "corpus.jsonl").open() as handle:
        for i, line in zip(range(contracts), handle, strict=False):
            doc = json.loads(line)
            (dest / f"{i:03d}.txt").write_text(doc.get("title", "") + "\n\n" + doc["text"])
            written += 1
    if written < contracts:
        raise SystemExit(f"corpus.jsonl holds {written} contracts, fewer than {contracts}")
    shutil.copytree(samples, dest / "samples")
    return written + sum(1 for p in (dest / "samples").rglob("*") if p.is_file())


def long_queries(n: int, contracts: int, words: int = 200, data: Path = DATA) -> list[str]:
    """`n` passages of `words` words from contracts after the indexed ones (not verbatim hits)."""
    out: list[str] = []
    with (data / "cuad" / "corpus.jsonl").open() as handle:
        for i, line in enumerate(handle):
            if i < contracts:
                continue
            tokens = json.loads(line)["text"].split()
            middle = max(0, len(tokens) // 2 - words // 2)
            if len(tokens) >= words:
                out.append(" ".join(tokens[middle : middle + words]))
            if len(out) == n:
                break
    return out


def docsearch_env(path: Path, threads: int) -> dict[str, str]:
    env = common_env(threads)
    env["PYTHONPATH"] = str(path)
    return env


def common_env(threads: int) -> dict[str, str]:
    """Offline (the Hub is unreachable) and the same thread count for every tool."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PEERS_THREADS=str(threads),
    )
    return env


def locate_model(python: str, env: dict[str, str]) -> Path:
    """The local MiniLM folder docsearch itself resolves (no Hub), shared by every tool."""
    code = f"from docsearch.encoders.weights import resolve_model; print(resolve_model({MINILM!r}))"
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"cannot locate {MINILM} through docsearch: {out.stderr.strip()[-400:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def ensure_venv(venv: Path) -> Path:
    """The peers' interpreter: `venv` made with PINS, reused when its marker lists the same."""
    python = venv / "bin" / "python"
    marker = venv / "peers-pins.txt"
    wanted = "\n".join(PINS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True)
    marker.write_text(wanted)
    return python


# ---------------------------------------------------------------- measuring one process tree


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                kids.extend(int(c) for c in handle.read().split())
    except OSError:
        pass
    return kids


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants, now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(_children(current))
    return found


def _rss_pss(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes; (0, 0) for a process that is gone. PSS splits shared pages."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


class TreeMemory:
    """Samples the summed RSS / PSS of a process tree in a thread; keeps the peaks.

    Summed RSS counts pages shared by forked workers once per process (an upper bound); PSS
    divides them between the sharers (what the tree really holds). Sampling every `interval`
    may miss a peak shorter than that.
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pids = tree(self.pid)
        sizes = [_rss_pss(p) for p in pids]
        self.peak_rss = max(self.peak_rss, sum(s[0] for s in sizes))
        self.peak_pss = max(self.peak_pss, sum(s[1] for s in sizes))
        self.peak_processes = max(self.peak_processes, sum(1 for s in sizes if s[0]))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def measured(cmd: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run `cmd` to the end: wall s, peak tree RSS/PSS (MB), CPU s, load before/after, rc."""
    before = os.getloadavg()[0]
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        with TreeMemory(proc.pid) as memory:
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return {
        "wall_s": round(wall, 2),
        "rc": proc.returncode,
        "peak_rss_mb": round(memory.peak_rss / 2**20),
        "peak_pss_mb": round(memory.peak_pss / 2**20),
        "processes": memory.peak_processes,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "load_before": round(before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


# ---------------------------------------------------------------- work done inside the peers' venv


def read_text(path: Path) -> str:
    """Plain text of one sample file, for the tools that have no reader of their own."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        from pypdf import PdfReader

        return "\n\n".join(page.extract_text() or "" for page in PdfReader(path).pages)
    if suffix == ".docx":
        import docx2txt

        return str(docx2txt.process(str(path)))
    if suffix in (".html", ".htm"):
        return html_text(path.read_text(errors="replace"))
    return path.read_text(errors="replace")


def html_text(markup: str) -> str:
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self.hidden = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            self.hidden += tag in ("script", "style")

        def handle_endtag(self, tag: str) -> None:
            self.hidden -= tag in ("script", "style") and self.hidden > 0

        def handle_data(self, data: str) -> None:
            if not self.hidden and data.strip():
                self.parts.append(data.strip())

    parser = Text()
    parser.feed(markup)
    return "\n".join(parser.parts)


def folder_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def windows(offsets: list[tuple[int, int]], text: str, size: int = WINDOW) -> list[str]:
    """Consecutive `size`-token windows of `text`, cut at token boundaries (no overlap)."""
    out = []
    for first in range(0, len(offsets), size):
        span = offsets[first : first + size]
        piece = text[span[0][0] : span[-1][1]].strip()
        if piece:
            out.append(piece)
    return out


def token_windows(folder: Path, model: Path) -> tuple[list[str], list[str], int]:
    """(window texts, their paths, total tokens) of every file, with the MiniLM tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    texts, paths, total = [], [], 0
    for path in folder_files(folder):
        text = read_text(path)
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
        total += len(offsets)
        for piece in windows(offsets, text):
            texts.append(piece)
            paths.append(str(path))
    return texts, paths, total


def set_threads() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("PEERS_THREADS", "2")))


def index_hand(folder: Path, db: Path, model: Path, bf16: bool) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer

    set_threads()
    encoder = SentenceTransformer(str(model), device="cpu")
    if bf16:
        encoder.to(torch.bfloat16)
    texts, paths, _ = token_windows(folder, model)
    vectors = encoder.encode(texts, batch_size=HAND_BATCH, normalize_embeddings=True)
    return lance_table(db, texts, paths, vectors)


def lance_table(db: Path, texts: list[str], paths: list[str], vectors: Any) -> dict[str, Any]:
    """The windows and their vectors as a LanceDB table with a full-text index (hand, fastembed)."""
    import lancedb
    import pyarrow as pa

    table = pa.table(
        {
            "text": texts,
            "path": paths,
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(vectors.astype("float32").ravel()), vectors.shape[1]
            ),
        }
    )
    store = lancedb.connect(str(db)).create_table("chunks", data=table)
    store.create_fts_index("text")
    return {"chunks": len(texts)}


def export_onnx(model: Path, dest: Path) -> dict[str, Any]:
    """MiniLM's BERT (token embeddings out) as dest/model.onnx, beside its tokenizer files: the
    folder fastembed loads. Not timed with the rounds: a user exports (or downloads) once."""
    import shutil as files

    import torch
    from transformers import AutoModel, AutoTokenizer

    class Hidden(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    dest.mkdir(parents=True, exist_ok=True)
    bert = Hidden(AutoModel.from_pretrained(str(model))).eval()  # eval: no dropout exported
    sample = AutoTokenizer.from_pretrained(str(model))(
        ["an export", "sample"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    zeros = torch.zeros_like(sample["input_ids"])  # a tokenizer without token types
    axes = {name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(
            bert, tuple(sample.get(n, zeros) for n in names), str(dest / "model.onnx"),
            dynamo=False,
            opset_version=17, input_names=names, output_names=["last_hidden_state"],
            dynamic_axes=axes,
        )  # fmt: skip
    for name in FASTEMBED_FILES:
        if (model / name).is_file():
            files.copy(model / name, dest / name)
    return {"onnx_mb": round((dest / "model.onnx").stat().st_size / 2**20, 1)}


def fastembed_model(onnx_dir: Path) -> Any:
    """fastembed's TextEmbedding on the local export: mean pooling and unit vectors, as MiniLM."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    if FASTEMBED_NAME not in {m["model"] for m in TextEmbedding.list_supported_models()}:
        TextEmbedding.add_custom_model(
            model=FASTEMBED_NAME, pooling=PoolingType.MEAN, normalization=True,
            sources=ModelSource(hf=FASTEMBED_NAME), dim=384, model_file="model.onnx",
        )  # fmt: skip
    threads = int(os.environ.get("PEERS_THREADS", "2"))
    return TextEmbedding(FASTEMBED_NAME, specific_model_path=str(onnx_dir), threads=threads)


def index_fastembed(folder: Path, db: Path, model: Path, onnx_dir: Path) -> dict[str, Any]:
    import numpy as np

    embedder = fastembed_model(onnx_dir)
    texts, paths, _ = token_windows(folder, model)
    vectors = np.asarray(list(embedder.embed(texts, batch_size=HAND_BATCH)), dtype=np.float32)
    return lance_table(db, texts, paths, vectors)


def index_txtai(folder: Path, db: Path, model: Path) -> dict[str, Any]:
    set_threads()
    from txtai import Embeddings

    texts, paths, _ = token_windows(folder, model)
    embeddings = Embeddings(path=str(model), content=True, hybrid=True)
    embeddings.index({"text": t, "path": p} for t, p in zip(texts, paths, strict=True))
    embeddings.save(str(db))
    return {"chunks": embeddings.count()}


def llama_parts(model: Path) -> tuple[Any, Any]:
    from llama_index.core import Settings
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers import AutoTokenizer

    set_threads()
    Settings.llm = None  # no LLM: indexing and retrieval only
    embed = HuggingFaceEmbedding(model_name=str(model), device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return embed, tokenizer


def index_llamaindex(folder: Path, db: Path, model: Path) -> dict[str, Any]:
    from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.vector_stores.lancedb import LanceDBVectorStore

    embed, tokenizer = llama_parts(model)
    documents = SimpleDirectoryReader(str(folder), recursive=True).load_data()
    # Chunks sized in MiniLM tokens to the model's window, no overlap: the same text is embedded
    # as by the other tools (the 1,024-token default would be truncated to 256 by the model).
    splitter = SentenceSplitter(
        chunk_size=WINDOW,
        chunk_overlap=0,
        tokenizer=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
    )
    store = LanceDBVectorStore(uri=str(db), table_name="chunks")
    index = VectorStoreIndex.from_documents(
        documents,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed,
        transformations=[splitter],
    )
    return {
        "chunks": len(index.index_struct.nodes_dict)
        or store.client.open_table("chunks").count_rows()
    }


def searcher(tool: str, db: Path, model: Path, onnx_dir: Path = Path()) -> Any:
    """A function query -> hits over the tool's index, everything loaded (one warm process)."""
    if tool == "docsearch":
        from docsearch.retriever import Retriever

        retriever = Retriever(COLLECTION, db=str(db))
        retriever.encoder()  # loaded here, as the other tools load theirs before the first query
        return lambda q: retriever.search(q, k=10)
    if tool == "txtai":
        set_threads()
        from txtai import Embeddings

        embeddings = Embeddings()
        embeddings.load(str(db))
        return lambda q: embeddings.search(q, 10)
    if tool == "llamaindex":
        from llama_index.core import VectorStoreIndex
        from llama_index.vector_stores.lancedb import LanceDBVectorStore

        embed, _ = llama_parts(model)
        store = LanceDBVectorStore(uri=str(db), table_name="chunks")
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
        retriever = index.as_retriever(similarity_top_k=10)
        return retriever.retrieve
    import lancedb

    table = lancedb.connect(str(db)).open_table("chunks")
    if tool == "fastembed":
        embedder = fastembed_model(onnx_dir)

        def embed(q: str) -> Any:
            return next(iter(embedder.query_embed(q)))
    else:
        from sentence_transformers import SentenceTransformer

        set_threads()
        encoder = SentenceTransformer(str(model), device="cpu")

        def embed(q: str) -> Any:
            return encoder.encode([q], normalize_embeddings=True)[0]

    def hybrid(q: str) -> Any:
        return table.search(query_type="hybrid").vector(embed(q)).text(q).limit(10).to_list()

    return hybrid


def latencies(search: Any, queries: list[str]) -> dict[str, float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        search(query)
        times.append((time.perf_counter() - start) * 1000)
    return percentiles(times)


def percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 1), "p95_ms": round(p95, 1), "n": len(ms)}


def worker(args: argparse.Namespace) -> None:
    """One job in a fresh process (`_index`, `_search`, `_count`); writes its JSON to --result."""
    folder, db, model = Path(args.folder or "."), Path(args.db or "."), Path(args.model)
    onnx_dir = Path(args.onnx_dir or ".")
    start = time.perf_counter()
    result: dict[str, Any]
    if args.job == "_export":
        result = export_onnx(model, onnx_dir)
    elif args.job == "_count":
        texts, _, total = token_windows(folder, model)
        result = {"tokens": total, "windows": len(texts), "files": len(folder_files(folder))}
    elif args.job == "_index":
        jobs = {
            "hand": lambda: index_hand(folder, db, model, bf16=False),
            "hand-bf16": lambda: index_hand(folder, db, model, bf16=True),
            "txtai": lambda: index_txtai(folder, db, model),
            "fastembed": lambda: index_fastembed(folder, db, model, onnx_dir),
            "llamaindex": lambda: index_llamaindex(folder, db, model),
        }
        result = jobs[args.tool]()
    else:
        queries = json.loads(Path(args.queries_path).read_text())
        search = searcher(args.tool, db, model, onnx_dir)
        loaded = time.perf_counter() - start
        for warm in queries["short"][:2] + queries["long"][:2]:
            search(warm)
        result = {
            "load_s": round(loaded, 2),
            "short": latencies(search, queries["short"]),
            "long": latencies(search, queries["long"]),
        }
    result["inner_s"] = round(time.perf_counter() - start, 2)
    Path(args.result).write_text(json.dumps(result))


# ---------------------------------------------------------------- the orchestration


class Bench:
    """One benchmark run: the folder, the interpreters, the rounds and the results."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        unknown = sorted(set(self.tools) - set(TOOLS))
        if unknown:
            raise SystemExit(f"unknown tools {unknown}; choose from {', '.join(TOOLS)}")
        self.ds_env = docsearch_env(Path(args.docsearch_path).resolve(), args.threads)
        self.env = common_env(args.threads)
        self.model = (
            Path(args.model) if args.model else locate_model(args.docsearch_python, self.ds_env)
        )
        self.peer_python = str(ensure_venv(Path(args.venv)))
        self.folder = work / "folder"
        self.files = build_folder(self.folder, args.contracts)
        self.runs: dict[str, list[dict[str, Any]]] = {t: [] for t in self.tools}
        self.onnx_dir = work / "minilm-onnx"  # fastembed's model, exported once
        self.last_db: dict[str, Path] = {}

    def job(self, job: str, tool: str = "", **paths: Path) -> list[str]:
        python = self.args.docsearch_python if tool == "docsearch" else self.peer_python
        cmd = [
            python,
            str(Path(__file__).resolve()),
            job,
            "--tool",
            tool,
            "--model",
            str(self.model),
        ]
        for name, value in paths.items():
            cmd += [f"--{name.replace('_', '-')}", str(value)]
        return cmd + (["--onnx-dir", str(self.onnx_dir)] if tool == "fastembed" else [])

    def export_onnx(self) -> dict[str, Any]:
        return self.run_job(self.job("_export", "fastembed"), self.env, "export-onnx")

    def run_job(self, cmd: list[str], env: dict[str, str], name: str) -> dict[str, Any]:
        result = self.work / f"{name}.json"
        log = self.work / f"{name}.log"
        measure = measured(cmd + ["--result", str(result)], env, log)
        if measure["rc"] != 0:
            tail = log.read_text()[-2000:]
            raise SystemExit(f"{name} failed (rc {measure['rc']}):\n{tail}")
        return {**measure, **json.loads(result.read_text())} if result.exists() else measure

    def count_tokens(self) -> dict[str, Any]:
        return self.run_job(self.job("_count", folder=self.folder), self.env, "count")

    def index(self, tool: str, round_no: int) -> dict[str, Any]:
        db = self.work / f"db-{tool}-{round_no}"
        name = f"index-{tool}-{round_no}"
        if tool == "docsearch":
            cli = [self.args.docsearch_python, "-m", "docsearch.app.cli", "index", str(self.folder)]
            cmd = cli + ["--collection", COLLECTION, "--db", str(db)]
            for option in self.args.docsearch_option:
                cmd += ["-o", option]
            log = self.work / f"{name}.log"
            run = measured(cmd, self.ds_env, log)
            if run["rc"] not in (0, 3):
                raise SystemExit(f"{name} failed (rc {run['rc']}):\n{log.read_text()[-2000:]}")
            run["chunks"] = docsearch_chunks(self.args.docsearch_python, self.ds_env, db)
        else:
            run = self.run_job(self.job("_index", tool, folder=self.folder, db=db), self.env, name)
        previous = self.last_db.get(tool)
        if previous is not None:  # keep only the newest index of each tool (disk)
            shutil.rmtree(previous, ignore_errors=True)
        self.last_db[tool] = db
        return run

    def search(self, tool: str, queries: Path) -> dict[str, Any]:
        env = self.ds_env if tool == "docsearch" else self.env
        cmd = self.job("_search", tool, db=self.last_db[tool], queries_file=queries)
        return self.run_job(cmd, env, f"search-{tool}")


def docsearch_chunks(python: str, env: dict[str, str], db: Path) -> int | None:
    code = (
        "import sys; from docsearch.store.reads import Store; "
        f"print(len(Store.open(sys.argv[1], {COLLECTION!r}).rows('ordinal >= 0', ['n_tokens'])))"
    )
    out = subprocess.run([python, "-c", code, str(db)], env=env, capture_output=True, text=True)
    return int(out.stdout.split()[-1]) if out.returncode == 0 and out.stdout.split() else None


def rotated(tools: list[str], round_no: int) -> list[str]:
    shift = round_no % len(tools)
    return tools[shift:] + tools[:shift]


def summarise(runs: dict[str, list[dict[str, Any]]], tokens: int) -> dict[str, dict[str, Any]]:
    """Per tool: medians over rounds (wall, tokens/s, RSS, PSS) and the range of wall times."""
    out = {}
    for tool, rows in runs.items():
        if not rows:
            continue
        walls = [r["wall_s"] for r in rows]
        out[tool] = {
            "wall_median_s": round(statistics.median(walls), 2),
            "wall_min_s": min(walls),
            "wall_max_s": max(walls),
            "tokens_per_s": round(tokens / statistics.median(walls)),
            "chunks": rows[-1].get("chunks"),
            "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in rows)),
            "peak_rss_max_mb": max(r["peak_rss_mb"] for r in rows),
            "peak_pss_mb": round(statistics.median(r["peak_pss_mb"] for r in rows)),
            "processes": max(r["processes"] for r in rows),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in rows), 1),
            # Less sensitive to other jobs on a shared machine than wall time (but blind to idle
            # waits and to how well a tool keeps both cores busy).
            "tokens_per_cpu_s": round(tokens / statistics.median(r["cpu_s"] for r in rows)),
        }
    return out


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """docsearch's throughput over the fastest peer library's and the hand pipeline's."""
    if "docsearch" not in summary:
        return {}
    mine = summary["docsearch"]["tokens_per_s"]
    out: dict[str, Any] = {}
    peers = [t for t in PEERS if t in summary]
    if peers:
        fastest = max(peers, key=lambda t: summary[t]["tokens_per_s"])
        out["fastest_peer"] = fastest
        out["vs_fastest_peer"] = round(mine / summary[fastest]["tokens_per_s"], 2)
        lowest = min(
            peers + ["hand"] if "hand" in summary else peers,
            key=lambda t: summary[t]["peak_rss_mb"],
        )
        out["lowest_rss_peer"] = lowest
        out["rss_vs_lowest_peer"] = round(
            summary["docsearch"]["peak_rss_mb"] / summary[lowest]["peak_rss_mb"], 2
        )
        thrifty = max(peers, key=lambda t: summary[t]["tokens_per_cpu_s"])
        out["cpu_vs_best_peer"] = round(
            summary["docsearch"]["tokens_per_cpu_s"] / summary[thrifty]["tokens_per_cpu_s"], 2
        )
    if "hand" in summary:
        out["vs_hand"] = round(mine / summary["hand"]["tokens_per_s"], 2)
        out["cpu_vs_hand"] = round(
            summary["docsearch"]["tokens_per_cpu_s"] / summary["hand"]["tokens_per_cpu_s"], 2
        )
    return out


def machine() -> dict[str, Any]:
    flags: set[str] = set()
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "flags": [f for f in wanted if f in flags],
        "python": platform.python_version(),
    }


def markdown(report: dict[str, Any], notes: str) -> str:
    summary, rat = report["summary"], report["ratios"]
    mach = report["machine"]
    lines = [
        "# Indexing next to the peers",
        "",
        f"Generated by `benchmarks/peers.py` on {report['date']}. Command:",
        "",
        f"    {report['command']}",
        "",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, flags {', '.join(mach['flags']) or 'none'}"
        f"; shared with other jobs (load below). Torch threads: {report['threads']}. "
        f"Folder: {report['files']} files ({report['contracts']} CUAD contracts as .txt + "
        f"docsearch's samples), {report['tokens']:,} MiniLM tokens. Model: `{report['model']}`. "
        f"{report['rounds']} interleaved rounds, fresh database each run.",
        "",
        "| tool | wall s, median (min-max) | tokens/s | throughput vs docsearch | chunks "
        "| peak RSS MB, tree (max) | peak PSS MB | processes | CPU s | tokens per CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    mine = summary.get("docsearch", {}).get("tokens_per_s")
    for tool, row in summary.items():
        relative = f"{row['tokens_per_s'] / mine:.2f}" if mine else "-"
        lines.append(
            f"| {tool} | {row['wall_median_s']:.1f} ({row['wall_min_s']:.1f}-{row['wall_max_s']:.1f})"
            f" | {row['tokens_per_s']:,} | {relative} | {row['chunks']} | {row['peak_rss_mb']}"
            f" ({row['peak_rss_max_mb']}) | {row['peak_pss_mb']} | {row['processes']} | {row['cpu_s']} | {row.get('tokens_per_cpu_s', '-')} |"
        )
    if rat:
        lines += ["", "Ratios (docsearch tokens/s over the other's; acceptance: >= 1.5):", ""]
        if "vs_fastest_peer" in rat:
            lines.append(
                f"- vs the fastest peer library ({rat['fastest_peer']}): **{rat['vs_fastest_peer']}x**"
            )
        if "vs_hand" in rat:
            lines.append(f"- vs the hand-written fp32 pipeline: **{rat['vs_hand']}x**")
        per_cpu = [
            f"{rat[key]}x {what}"
            for key, what in (
                ("cpu_vs_best_peer", "the best peer library"),
                ("cpu_vs_hand", "hand"),
            )
            if key in rat
        ]
        if per_cpu:
            lines.append(f"- by tokens per CPU second: {', '.join(per_cpu)}")
        if "rss_vs_lowest_peer" in rat:
            lines.append(
                f"- peak RSS vs the lowest of the others ({rat['lowest_rss_peer']}): "
                f"{rat['rss_vs_lowest_peer']}x (acceptance: <= 1.0)"
            )
    lines += ["", "Every run, in the order run (1-minute load average before -> after):", ""]
    lines += ["| round | tool | wall s | peak RSS MB | CPU s | load |", "|---|---|---|---|---|---|"]
    for row in report["order"]:
        lines.append(
            f"| {row['round']} | {row['tool']} | {row['wall_s']:.1f} | {row['peak_rss_mb']} | "
            f"{row['cpu_s']} | {row['load_before']:.2f} -> {row['load_after']:.2f} |"
        )
    if report.get("search"):
        lines += [
            "",
            f"Search over each tool's last index, fresh process, k=10, {report['queries']} queries "
            "each; model load excluded, query encoding included:",
            "",
            "| tool | mode | load s | short p50 / p95 ms | ~200-word p50 / p95 ms | load |",
            "|---|---|---|---|---|---|",
        ]
        for tool, row in report["search"].items():
            lines.append(
                f"| {tool} | {SEARCH_MODES.get(tool, '')} | {row['load_s']} | {row['short']['p50_ms']} / "
                f"{row['short']['p95_ms']} | {row['long']['p50_ms']} / {row['long']['p95_ms']} | "
                f"{row['load_before']:.2f} -> {row['load_after']:.2f} |"
            )
    lines += ["", "How each tool is set up: see the docstring of benchmarks/peers.py.", "", NOTES]
    return "\n".join(lines) + "\n" + notes


SEARCH_MODES = {
    "docsearch": "hybrid (default), documents",
    "llamaindex": "vector (default retriever)",
    "txtai": "hybrid",
    "fastembed": "lancedb hybrid (vector + FTS, RRF)",
    "hand": "lancedb hybrid (vector + FTS, RRF)",
}


def kept_notes(path: Path) -> str:
    if not path.exists():
        return ""
    text = path.read_text()
    return text.split(NOTES, 1)[1].lstrip("\n") if NOTES in text else ""


def write_report(report: dict[str, Any], out: Path, name: str = "peers") -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    md = out / f"{name}.md"
    md.write_text(markdown(report, kept_notes(md)))
    print(markdown(report, ""))


def render(out: Path, name: str = "peers") -> None:
    """Rewrite peers.md (and the summary in peers.json) from the runs peers.json holds."""
    report = json.loads((out / f"{name}.json").read_text())
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in report["order"]:
        runs.setdefault(row["tool"], []).append(row)
    report["summary"] = summarise(runs, report["tokens"])
    report["ratios"] = ratios(report["summary"])
    write_report(report, out, name)


def orchestrate(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="peers-"))
    try:
        bench = Bench(args, work)
        count = bench.count_tokens()
        tokens = count["tokens"]
        print(f"folder: {bench.files} files, {tokens:,} tokens; model {bench.model}", flush=True)
        if "fastembed" in bench.tools:
            print(f"fastembed's ONNX export: {json.dumps(bench.export_onnx())}", flush=True)
        order = []
        for round_no in range(args.rounds):
            for tool in rotated(bench.tools, round_no):
                run = bench.index(tool, round_no)
                bench.runs[tool].append(run)
                order.append({"round": round_no + 1, "tool": tool, **run})
                print(f"round {round_no + 1} {tool}: {json.dumps(run)}", flush=True)
        search = {}
        if not args.no_search:
            queries = work / "queries.json"
            short = list(SHORT_QUERIES[: args.queries])
            queries.write_text(
                json.dumps({"short": short, "long": long_queries(args.queries, args.contracts)})
            )
            for tool in bench.tools:
                if tool != "hand-bf16":
                    search[tool] = bench.search(tool, queries)
                    print(f"search {tool}: {json.dumps(search[tool])}", flush=True)
        summary = summarise(bench.runs, tokens)
        report = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join([*isa_caps(), "python", "benchmarks/peers.py", *sys.argv[1:]]),
            "machine": machine(),
            "threads": args.threads,
            "contracts": args.contracts,
            "files": bench.files,
            "tokens": tokens,
            "model": str(bench.model),
            "rounds": args.rounds,
            "queries": args.queries,
            "summary": summary,
            "ratios": ratios(summary),
            "order": order,
            "search": search,
        }
        write_report(report, Path(args.out), args.name)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


# The variables that cap the instruction sets torch's kernel libraries use (cpu_classes.py).
ISA_CAPS = (
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
)


def isa_caps() -> list[str]:
    """The CPU-class caps this run was under, as they would be typed before the command.

    They change every tool's speed, so a report that leaves them out cannot be rerun."""
    return [f"{name}={os.environ[name]}" for name in ISA_CAPS if name in os.environ]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "job",
        nargs="?",
        default="bench",
        choices=("bench", "render", "_index", "_search", "_count", "_export"),
    )
    parser.add_argument(
        "--tools", default=",".join(DEFAULT_TOOLS), help=f"any of {', '.join(TOOLS)}"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contracts", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--queries", type=int, default=30, help="short and long queries, each")
    parser.add_argument("--no-search", action="store_true")
    parser.add_argument("--docsearch-python", default=sys.executable)
    parser.add_argument("--docsearch-path", default=str(REPO), help="put on PYTHONPATH")
    parser.add_argument(
        "--docsearch-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="encoder option for `docsearch index -o` (e.g. precision=fp32, what a CPU without "
        "fast bf16 runs); repeatable",
    )
    parser.add_argument("--venv", default=str(DEFAULT_VENV))
    parser.add_argument("--model", default="", help="model folder (default: docsearch's MiniLM)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="peers", help="results file names: NAME.json, NAME.md")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, indexes)")
    # the worker side
    parser.add_argument("--tool", default="")
    parser.add_argument("--folder", default="")
    parser.add_argument("--db", default="")
    parser.add_argument("--onnx-dir", default="", help="fastembed's exported model (worker side)")
    parser.add_argument("--queries-file", dest="queries_path", default="")
    parser.add_argument("--result", default="")
    return parser.parse_args(argv)


def main() -> None:
    args = parse(sys.argv[1:])
    if args.job == "bench":
        orchestrate(args)
    elif args.job == "render":
        render(Path(args.out), args.name)
    else:
        worker(args)


if __name__ == "__main__":
    main()
