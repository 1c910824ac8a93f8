"""The Ray engine builds the same collection as the local engine.

Fast tests run the engine's stages in this process (no cluster): the extraction task, the
embedding actor's `process`, the single commit, behind the indexing service as the engine does. Slow tests run the real thing
on a local Ray cluster (a head and two worker nodes, see conftest.py), with the hashing fake
encoder and with the real sentence-transformers model, including a second, incremental run.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from docsearch.errors import UsageError
from docsearch.indexer.pipeline import IndexReport, Job
from docsearch.indexer.plan import Plan
from docsearch.store.indexes import index_health
from docsearch.store.reads import Store
from docsearch.store.writes import Writer
from tests.helpers import SAMPLES, documents, index_into
from tests.scale.equality import (
    assert_same_chunks,
    assert_same_documents,
    assert_same_search,
    edit_corpus,
    files,
    same_counts,
)

ray_engine = pytest.importorskip("docsearch.indexer.ray_engine")
pytest.importorskip("lance_ray")
pytestmark = pytest.mark.ray  # `make test-ray` installs the extra and runs these

HASHING: dict[str, Any] = {"encoder": "hashing", "options": {"max_tokens": 64}}
# IVF_FLAT with 2 partitions trains on the sample corpus's ~70 chunks (and its 5 documents: a
# sample rate of 2 needs 4 rows) and, probed fully, returns exactly what brute force does: it
# exercises the distributed vector-index path in the tests.
SMALL_VECTOR_INDEX = {
    "index_type": "IVF_FLAT",
    "metric": "cosine",
    "num_partitions": 2,
    "sample_rate": 2,
}


class InlineRay:
    """The Ray engine's stage tasks, actor and single commit, run in this process in the order
    Ray would run them (each file's outcome pickled as it crosses the wire)."""

    embeds_here = False

    def __init__(self, files_per_batch: int = 2, refresh: bool = True) -> None:
        self.files_per_batch, self.refresh = files_per_batch, refresh

    def run(self, job: Job, work: Plan) -> None:
        outcomes = [
            pickle.loads(ray_engine.extract_task(row, job.limits, work.deleted_shas)["payload"])
            for row in ray_engine.task_rows(work)
        ]
        worker = ray_engine.EmbedWorker(**ray_engine.EmbedWorker.arguments(job))
        n = self.files_per_batch
        batches = [outcomes[start : start + n] for start in range(0, len(outcomes), n)]
        ray_engine.commit_results(job, work, [worker.process(batch) for batch in batches])
        if self.refresh:
            job.writer.refresh_indexes()


def run_local(root: Path, db: str, encoder: dict[str, Any] = HASHING) -> IndexReport:
    return index_into(db, root, **encoder)


def run_inline(
    root: Path,
    db: str,
    files_per_batch: int = 2,
    refresh: bool = True,
    encoder: dict[str, Any] = HASHING,
) -> IndexReport:
    return index_into(db, root, engine=InlineRay(files_per_batch, refresh), **encoder)


def run_ray(root: Path, db: str, encoder: dict[str, Any] = HASHING, **kw: Any) -> IndexReport:
    return index_into(db, root, engine=ray_engine.RayEngine(workers=2, **kw), **encoder)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SAMPLES, tmp_path / "docs"))


# ---------------------------------------------------------------------------------------------
# Fast: the stages without a cluster


def test_stages_build_the_local_engines_collection_then_follow_edits(
    corpus: Path, tmp_path: Path
) -> None:
    local, inline = str(tmp_path / "local"), str(tmp_path / "inline")
    first = run_local(corpus, local), run_inline(corpus, inline)
    assert same_counts(*first) and first[0].new == 5
    assert assert_same_chunks(local, inline) == first[0].chunks_written > 5
    assert assert_same_documents(local, inline) == 5
    assert files(local) == files(inline)
    edit_corpus(corpus)
    second = run_local(corpus, local), run_inline(corpus, inline)
    assert same_counts(*second)
    r = second[1]
    assert (r.new, r.changed, r.renamed, r.touched, r.deleted, len(r.failed)) == (1, 1, 1, 1, 1, 1)
    assert 0 < r.chunks_embedded < r.chunks_written  # renamed and unchanged chunks were reused
    assert_same_chunks(local, inline)
    assert assert_same_documents(local, inline) == 5  # one new, one deleted, one renamed
    assert files(local) == files(inline)
    assert_same_search(local, inline, modes=("lexical", "vector"))


def test_lexical_only_collection(corpus: Path, tmp_path: Path) -> None:
    lexical = {"encoder": "none", "options": {}}
    local, inline = str(tmp_path / "local"), str(tmp_path / "inline")
    reports = run_local(corpus, local, lexical), run_inline(corpus, inline, encoder=lexical)
    assert same_counts(*reports) and reports[1].chunks_embedded == 0
    assert assert_same_chunks(local, inline) == reports[1].chunks_written
    assert assert_same_documents(local, inline) == 5
    assert_same_search(local, inline, modes=("lexical",))


PENDING_VERSIONS = 2  # a commit's pending paths: set, then cleared


def test_a_run_commits_the_chunks_once(corpus: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "db")
    run_inline(corpus, db)
    store = Writer(Store.open(db, "c"))
    before, docs_before = store.chunks.version, store.docs.version
    nda = corpus / "contracts" / "mutual-nda-initech.md"
    nda.write_text("# Short\n\nOnly this line is left.\n")
    (corpus / "clinical" / "hypertension-guideline.html").unlink()
    (corpus / "new.md").write_text("# New\n\nA new file.\n")
    report = run_inline(corpus, db, files_per_batch=1, refresh=False)
    assert (report.new, report.changed, report.deleted) == (1, 1, 1)
    store = Writer(Store.open(db, "c"))
    # New rows in and old rows out: one version of data; the two others only set the paths it
    # replaces as pending before it and clear them after (config, no rows: store/pending.py).
    assert store.chunks.version == before + 1 + PENDING_VERSIONS
    assert store.docs.version == docs_before + 1 + PENDING_VERSIONS  # and for their documents
    assert [r["text"] for r in store.store.rows(f"path = '{nda}'")] == [
        "# Short\n\nOnly this line is left."
    ]
    assert store.store.count_chunks("path LIKE '%hypertension%'") == 0
    docs = documents(db)
    assert docs[str(nda)]["text"] == "# Short\n\nOnly this line is left."
    assert not any("hypertension" in path for path in docs)


def test_a_switch_builds_through_the_store_the_new_version_a_local_build_makes(
    corpus: Path, tmp_path: Path
) -> None:
    """The actors write the version a switch builds (not the serving one); the swap follows."""
    from docsearch.store.database import Database

    switched, local = str(tmp_path / "switched"), str(tmp_path / "local")
    run_inline(corpus, switched)
    other = {"encoder": "hashing", "options": {"max_tokens": 64, "dim": 32}}
    report = index_into(switched, corpus, engine=InlineRay(), switch=True, **other)
    assert report.new == 5 and Database(switched).versions("c").active == 1
    run_local(corpus, local, other)
    assert assert_same_chunks(local, switched) == report.chunks_written
    assert assert_same_documents(local, switched) == 5
    assert files(local) == files(switched)


def test_unchanged_folder_needs_no_cluster(corpus: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "db")
    run_inline(corpus, db)
    nowhere = ray_engine.RayEngine(address="ray://nowhere:1")
    report = index_into(db, corpus, engine=nowhere, **HASHING)
    assert report.unchanged == 5 and report.chunks_written == 0


def test_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        index_into(str(tmp_path / "db"), tmp_path / "nope", engine=ray_engine.RayEngine())


def test_worker_errors_surface_as_the_domain_error() -> None:
    from docsearch.errors import EncoderUnavailableError

    inner = EncoderUnavailableError("weights missing; run `docsearch models pull`")
    try:
        try:
            raise inner
        except EncoderUnavailableError as exc:
            raise RuntimeError("Ray task failed") from exc
    except RuntimeError as wrapped:
        assert ray_engine._domain_error(wrapped) is inner
    assert ray_engine._domain_error(RuntimeError("plain")) is None


# ---------------------------------------------------------------------------------------------
# Slow: a real Ray cluster


@pytest.mark.slow
def test_ray_cluster_builds_the_local_engines_collection(
    ray_cluster: Any, corpus: Path, tmp_path: Path
) -> None:
    local, distributed = str(tmp_path / "local"), str(tmp_path / "ray")
    vector = {"vector_index_min_rows": 1, "vector_index": SMALL_VECTOR_INDEX}
    first = run_local(corpus, local), run_ray(corpus, distributed, **vector)
    assert same_counts(*first) and first[1].new == 5
    assert assert_same_chunks(local, distributed) == first[1].chunks_written
    assert assert_same_documents(local, distributed) == 5
    assert files(local) == files(distributed)
    names = {cfg.name for cfg in Writer(Store.open(distributed, "c")).chunks.list_indices()}
    assert {"text_idx", "path_idx", "text_sha_idx", "vector_idx"} <= names
    docs = {cfg.name for cfg in Writer(Store.open(distributed, "c")).docs.list_indices()}
    assert docs == {"text_idx", "vector_idx"}
    assert_same_search(local, distributed)

    edit_corpus(corpus)
    second = run_local(corpus, local), run_ray(corpus, distributed, **vector)
    assert same_counts(*second)
    assert (second[1].changed, second[1].renamed, second[1].deleted) == (1, 1, 1)
    assert_same_chunks(local, distributed)
    assert assert_same_documents(local, distributed) == 5
    assert files(local) == files(distributed)
    assert_same_search(local, distributed)
    health = index_health(Store.open(distributed, "c"))
    assert health["fts_unindexed_rows"] == 0


@pytest.mark.slow
def test_ray_cluster_with_sentence_transformers(
    ray_cluster: Any, corpus: Path, tmp_path: Path
) -> None:
    # fp32 on both engines: on a CPU where "auto" picks bf16, bf16 vectors also depend on the
    # batch shapes each engine forms (about 1e-3 apart), which is not what this test compares.
    minilm = {"encoder": "sentence-transformers", "options": {"precision": "fp32"}}
    local, distributed = str(tmp_path / "local"), str(tmp_path / "ray")
    first = run_local(corpus, local, minilm), run_ray(corpus, distributed, minilm)
    assert same_counts(*first)
    assert assert_same_chunks(local, distributed, atol=1e-5) == first[1].chunks_written
    assert assert_same_documents(local, distributed, atol=1e-5) == 5
    assert_same_search(local, distributed)
