"""benchmarks/peers.py: the parts that decide its numbers, checked without a model or network.

Windows cover every token once, the memory sampler sees a child's memory, rounds rotate, the
ratios compare the right tools, the folder holds the contracts and the samples, and hand-written
notes survive a rewrite of peers.md.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "benchmarks" / "peers.py"


@pytest.fixture(scope="module")
def peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers_benchmark", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-free, but keep the usual import contract
    spec.loader.exec_module(module)
    return module


def test_windows_cover_each_token_once_and_cut_at_token_edges(peers: ModuleType) -> None:
    text = " ".join(f"w{i}" for i in range(10))
    offsets, at = [], 0
    for word in text.split():
        start = text.index(word, at)
        offsets.append((start, start + len(word)))
        at = start + len(word)
    pieces = peers.windows(offsets, text, size=4)
    assert pieces == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]


def test_tree_memory_counts_a_grandchilds_memory(peers: ModuleType, tmp_path: Path) -> None:
    # The child starts a grandchild holding ~200 MB; a sampler of the child alone would miss it.
    grandchild = "b = bytearray(200 * 2**20); import time; time.sleep(1.5)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"
    run = peers.measured([sys.executable, "-c", child], {}, tmp_path / "log")
    assert run["rc"] == 0
    assert run["processes"] >= 2
    assert run["peak_rss_mb"] >= 200 and run["peak_pss_mb"] >= 190
    assert run["wall_s"] >= 1.5


def test_rounds_rotate_so_each_tool_leads_once(peers: ModuleType) -> None:
    tools = ["a", "b", "c"]
    firsts = [peers.rotated(tools, r)[0] for r in range(3)]
    assert sorted(firsts) == tools
    assert all(sorted(peers.rotated(tools, r)) == tools for r in range(3))


def test_ratios_use_the_fastest_peer_library_and_the_lowest_memory(peers: ModuleType) -> None:
    def row(wall: float, rss: int) -> dict[str, float]:
        return {"wall_s": wall, "peak_rss_mb": rss, "peak_pss_mb": rss, "processes": 1, "cpu_s": 1}

    runs = {
        "docsearch": [row(10, 900), row(12, 950), row(11, 920)],
        "llamaindex": [row(30, 1000)],
        "txtai": [row(20, 980)],
        "hand": [row(22, 850)],
    }
    summary = peers.summarise(runs, tokens=22_000)
    assert summary["docsearch"]["wall_median_s"] == 11
    assert summary["docsearch"]["tokens_per_s"] == 2000
    ratios = peers.ratios(summary)
    assert ratios["fastest_peer"] == "txtai"
    assert ratios["vs_fastest_peer"] == pytest.approx(20 / 11, abs=0.01)
    assert ratios["vs_hand"] == pytest.approx(2.0, abs=0.01)
    assert ratios["lowest_rss_peer"] == "hand"
    assert ratios["rss_vs_lowest_peer"] == pytest.approx(920 / 850, abs=0.01)
    # Every run took 1 CPU second here: per CPU second the tools tie.
    assert ratios["cpu_vs_best_peer"] == ratios["cpu_vs_hand"] == 1.0


def test_render_rebuilds_the_tables_from_the_recorded_runs(
    peers: ModuleType, tmp_path: Path
) -> None:
    run = {"peak_rss_mb": 900, "peak_pss_mb": 800, "processes": 2, "cpu_s": 5.0}
    run |= {"load_before": 1.0, "load_after": 2.0, "chunks": 7}
    order = [{"round": 1, "tool": "docsearch", "wall_s": 10.0, **run}]
    order += [{"round": 1, "tool": "hand", "wall_s": 20.0, **run, "cpu_s": 10.0}]
    mach = {"cpu": "x", "cores": 2, "flags": [], "python": "3.11"}
    report = {"date": "d", "command": "c", "machine": mach, "threads": 2, "contracts": 1}
    report |= {"files": 2, "tokens": 1000, "model": "m", "rounds": 1, "queries": 0}
    report |= {"order": order, "search": {}}
    (tmp_path / "peers.json").write_text(json.dumps(report))
    (tmp_path / "peers.md").write_text(f"stale\n{peers.NOTES}\nkept note\n")
    peers.render(tmp_path)
    md = (tmp_path / "peers.md").read_text()
    assert (
        "| docsearch | 10.0 (10.0-10.0) | 100 | 1.00 | 7 | 900 (900) | 800 | 2 | 5.0 | 200 |" in md
    )
    assert "hand-written fp32 pipeline: **2.0x**" in md
    assert md.endswith("kept note\n") and "stale" not in md


def test_percentiles_of_twenty_samples(peers: ModuleType) -> None:
    got = peers.percentiles([float(ms) for ms in range(1, 21)])
    assert got == {"p50_ms": 10.5, "p95_ms": 19.0, "n": 20}


def test_folder_holds_the_contracts_and_the_samples(peers: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "cuad").mkdir(parents=True)
    docs = [{"_id": str(i), "title": f"T{i}", "text": f"body {i}"} for i in range(5)]
    (data / "cuad" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    samples = tmp_path / "samples"
    (samples / "x").mkdir(parents=True)
    (samples / "x" / "a.md").write_text("# a")
    count = peers.build_folder(tmp_path / "folder", 3, data=data, samples=samples)
    assert count == 4
    assert (tmp_path / "folder" / "002.txt").read_text() == "T2\n\nbody 2"
    assert not (tmp_path / "folder" / "003.txt").exists()
    with pytest.raises(SystemExit, match="fewer than 9"):
        peers.build_folder(tmp_path / "again", 9, data=data, samples=samples)


def test_notes_under_the_marker_survive_a_rewrite(peers: ModuleType, tmp_path: Path) -> None:
    md = tmp_path / "peers.md"
    md.write_text(f"old table\n{peers.NOTES}\n- my observation\n")
    assert peers.kept_notes(md) == "- my observation\n"
    assert peers.kept_notes(tmp_path / "missing.md") == ""


def test_html_text_drops_scripts_and_keeps_words(peers: ModuleType) -> None:
    markup = "<html><style>p{}</style><p>Target <b>130/80</b></p><script>x=1</script></html>"
    assert peers.html_text(markup) == "Target\n130/80"


def test_fastembed_is_a_peer_library_in_the_ratios(peers: ModuleType) -> None:
    def row(wall: float) -> dict[str, float]:
        return {"wall_s": wall, "peak_rss_mb": 500, "peak_pss_mb": 500, "processes": 1, "cpu_s": 1}

    runs = {"docsearch": [row(10)], "txtai": [row(20)], "fastembed": [row(15)], "hand": [row(22)]}
    ratios = peers.ratios(peers.summarise(runs, tokens=1000))
    assert "fastembed" in peers.DEFAULT_TOOLS
    assert ratios["fastest_peer"] == "fastembed"
    assert ratios["vs_fastest_peer"] == pytest.approx(1.5, abs=0.02)


def test_fastembed_workers_get_the_local_export(peers: ModuleType, tmp_path: Path) -> None:
    args = peers.parse(["_index", "--tool", "fastembed", "--onnx-dir", str(tmp_path)])
    assert args.job == "_index" and args.onnx_dir == str(tmp_path)
    assert peers.parse(["_export", "--tool", "fastembed"]).job == "_export"


@pytest.mark.usefixtures("one_torch_thread")
def test_the_onnx_export_fastembed_loads_gives_bert_token_vectors(
    peers: ModuleType, tiny_st: Path, tmp_path: Path
) -> None:
    """The exported graph (what fastembed runs) gives the same token vectors as transformers'
    BertModel, for another length and batch than it was traced with; the tokenizer travels."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import numpy as np
    import onnxruntime
    import torch
    from transformers import AutoModel, AutoTokenizer

    peers.export_onnx(tiny_st, tmp_path / "export")
    assert (tmp_path / "export" / "tokenizer.json").is_file()
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"))
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state"]
    tokens = AutoTokenizer.from_pretrained(str(tmp_path / "export"))
    features = tokens(["pump valve alarm " * 5, "a", "fee due"], padding=True, return_tensors="pt")
    types = features.get("token_type_ids", torch.zeros_like(features["input_ids"]))
    feed = {**{k: v.numpy() for k, v in features.items()}, "token_type_ids": types.numpy()}
    (got,) = session.run(None, feed)
    with torch.no_grad():
        bert = AutoModel.from_pretrained(str(tiny_st)).eval()
        expected = bert(**features).last_hidden_state.numpy()
    assert np.abs(got - expected).max() < 1e-4


def test_fastembed_embeds_with_the_local_export(
    peers: ModuleType, tiny_st: Path, tmp_path: Path
) -> None:
    """Where fastembed is installed (the peers' environment), it loads the export offline and
    gives MiniLM's mean-pooled unit vectors."""
    pytest.importorskip("fastembed")
    import numpy as np
    from sentence_transformers import SentenceTransformer

    peers.export_onnx(tiny_st, tmp_path / "export")
    embedder = peers.fastembed_model(tmp_path / "export")
    texts = ["pump valve alarm", "contract party shall terminate notice breach"]
    got = np.asarray(list(embedder.embed(texts)))
    expected = SentenceTransformer(str(tiny_st), device="cpu").encode(texts)
    assert np.abs(got - expected).max() < 1e-4
