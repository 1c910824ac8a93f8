"""Query by document (`Retriever.similar`, `docsearch similar`, `eval --similar`) on a tiny corpus.

The collection holds a pump maintenance report, a near-copy of it, a PDF manual whose third
page is about the same pump, and documents on other subjects. Asked for documents like the report,
the near-copy must come first and the report itself never appear; a copy of the report written in
any supported format outside the collection must find both; each result must name key terms
both documents hold and the page of each passage.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from docsearch import similar
from docsearch.app.cli import app
from docsearch.errors import UsageError
from docsearch.fusion import Fusion
from docsearch.retriever import Retriever
from docsearch.similar import ChunkMatch, TermStats, _stats, collection_stats
from docsearch.store.database import Database, cache_file
from docsearch.text import index_words as words
from tests.helpers import index_into, make_docx, make_pdf, running_as_root, scan_image

PUMP = [
    "The coolant pump impeller showed cavitation pitting after the overhaul of unit four.",
    "Bearing vibration on the pump shaft rose above the alarm limit during the night shift.",
    "Technicians replaced the mechanical seal and balanced the impeller before restart.",
    "Cavitation returned when the suction strainer clogged, so the strainer mesh was changed.",
]
OTHERS = {
    "bakery.md": "Our bakery sells rye loaves and almond pastries. The ovens are lit at four. "
    "Flour arrives by cart each morning and the baker kneads dough before dawn.",
    "ferry.md": "The ferry timetable changes in winter when storms close the northern harbour. "
    "Passengers wait at the pier while the captain checks the weather and the tide.",
    "garden.txt": "Tomato seedlings want warm soil and regular watering. The gardener ties "
    "each stem to a cane and picks the ripe fruit in late summer.",
}
FILLER = "Volunteers sorted donated atlases by region and repainted the library shelves."
# A page on words no document of the collection holds (the query PDFs' first page).
ELSEWHERE = "A string quartet rehearsed Haydn in the chapel while pigeons nested in the tower."


def _corpus(root: Path) -> None:
    root.mkdir()
    (root / "report.md").write_text("# Pump report\n\n" + "\n\n".join(PUMP) + "\n")
    near = [line.replace("unit four", "unit five") for line in PUMP]
    (root / "report_copy.txt").write_text("\n\n".join(near) + "\n")
    pages = ["\n".join([FILLER] * 4), OTHERS["ferry.md"].replace(". ", ".\n"), "\n".join(PUMP[:2])]
    make_pdf(root / "manual.pdf", pages)
    for name, text in OTHERS.items():
        (root / name).write_text(text + "\n")


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("similar")
    _corpus(tmp / "docs")
    db = str(tmp / "db")
    report = index_into(db, tmp / "docs", "c", options={"max_tokens": 40})
    assert not report.failed
    return tmp / "docs", db


def _paths(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [Path(h.path).name for h in hits]


@pytest.mark.parametrize("mode", ["lexical", "hybrid", "vector"])
def test_the_query_document_is_left_out_and_its_near_copy_ranks_first(
    collection: tuple[Path, str], mode: str
) -> None:
    root, db = collection
    retriever = Retriever("c", db=db)
    by_path = retriever.similar(str(root / "report.md"), k=10, mode=mode)
    names = _paths(by_path)
    assert "report.md" not in names
    assert names[0] == "report_copy.txt"
    assert len(names) == len(set(names)) == 5  # every other document of the collection
    if mode != "lexical":  # the default dense sides match chunk to chunk too
        assert by_path[0].scores["chunk_dense"]["rank"] == 1
    by_id = retriever.similar(by_path[0].doc_id, k=3, mode=mode)  # the copy, named by doc id
    assert "report_copy.txt" not in _paths(by_id)
    assert _paths(by_id)[0] == "report.md"


def _write(path: Path, fmt: str, paragraphs: list[str]) -> Path:
    """`paragraphs` as a file of format `fmt`; the PDF puts them on page 2, after a filler page."""
    if fmt == "pdf":
        return make_pdf(path, ["\n".join([ELSEWHERE] * 4), "\n".join(paragraphs)])
    if fmt == "docx":
        return make_docx(path, [(1, "Pump notes"), *[(0, p) for p in paragraphs]])
    if fmt == "png":  # a scan: read by OCR
        scan_image("\n".join(textwrap.fill(p, 60) for p in paragraphs)).save(path)
        return path
    if fmt in ("html", "htm"):
        body = "".join(f"<p>{p}</p>" for p in paragraphs)
        path.write_text(f"<html><body><h1>Pump notes</h1>{body}</body></html>")
        return path
    path.write_text("\n\n".join(paragraphs) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["txt", "md", "rst", "html", "htm", "docx", "pdf", "png"])
def test_a_file_outside_the_collection_works_in_every_format(
    collection: tuple[Path, str], tmp_path: Path, fmt: str
) -> None:
    _, db = collection
    query = _write(tmp_path / f"query.{fmt}", fmt, PUMP)
    hits = Retriever("c", db=db).similar(str(query), k=3, mode="lexical")
    assert set(_paths(hits)[:2]) == {"report.md", "report_copy.txt"}  # neither is left out
    best = hits[0]
    assert "strainer" in best.terms  # twice in each, and in no other document
    assert set(best.terms) <= set(words(" ".join(PUMP)))
    assert best.query_passage is not None
    assert best.query_passage.pages == ("2" if fmt == "pdf" else "1")


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_a_long_file_outside_the_collection_is_embedded_and_not_capped(
    collection: tuple[Path, str], tmp_path: Path, mode: str
) -> None:
    _, db = collection
    query = _write(tmp_path / "long.txt", "txt", PUMP * 40)  # 13k characters: over the query cap
    assert len(query.read_text()) > 10_000
    hits = Retriever("c", db=db).similar(str(query), k=2, mode=mode)
    assert set(_paths(hits)) == {"report.md", "report_copy.txt"}
    assert "doc_dense" in hits[0].scores


def test_a_long_query_document_is_embedded_through_an_even_spread_of_its_chunks(
    collection: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, db = collection
    monkeypatch.setattr(similar, "MAX_QUERY_CHUNKS", 3)
    retriever = Retriever("c", db=db)
    encoder = retriever.encoder()
    embedded: list[list[str]] = []
    real = encoder.encode_documents

    def recorded(texts):  # type: ignore[no-untyped-def]
        embedded.append(list(texts))
        return real(texts)

    monkeypatch.setattr(encoder, "encode_documents", recorded)
    source = _write(tmp_path / "long.txt", "txt", PUMP * 6)
    query = similar.query_document(retriever.store, str(source), encoder)
    assert query.needs_vectors and len(query.chunks) > 3
    done = query.embed(encoder)
    picked = [c.ordinal for c in done.embedded]
    assert picked[0] == 0 and picked[-1] == len(query.chunks) - 1 and len(picked) == 3
    assert embedded == [[c.text for c in done.embedded]]  # only the spread was encoded
    assert done.chunk_vectors is not None and done.vector is not None
    mean = done.chunk_vectors.mean(axis=0)
    np.testing.assert_allclose(done.vector, mean / np.linalg.norm(mean), atol=1e-6)
    hits = retriever.similar(str(source), k=2, mode="vector")
    assert set(_paths(hits)) == {"report.md", "report_copy.txt"}
    shown = {c.chunk_id for c in done.embedded}
    assert all(pair.query.chunk_id in shown for hit in hits for pair in hit.pairs)


def test_spread_keeps_the_ends_and_never_more_than_asked() -> None:
    assert similar.spread(4, 16) == [0, 1, 2, 3]
    assert similar.spread(60, 16)[:1] == [0] and similar.spread(60, 16)[-1] == 59
    for count in range(1, 80):
        for limit in (1, 2, 5, 16):
            picked = similar.spread(count, limit)
            assert len(picked) == min(count, limit) and picked == sorted(set(picked))
            assert all(0 <= i < count for i in picked)


def test_word_statistics_follow_the_collection(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    db = str(tmp_path / "db")
    index_into(db, root, "c", encoder="none")
    query = _write(tmp_path / "query.txt", "txt", ["The flywheel and the strainer wore out."])
    before = Retriever("c", db=db).similar(str(query), k=1, mode="lexical")
    assert "flywheel" not in before[0].terms  # no document held it
    (root / "flywheel.md").write_text("The flywheel cracked; the flywheel was replaced.\n")
    index_into(db, root, "c", encoder="none")
    after = Retriever("c", db=db).similar(str(query), k=1, mode="lexical")
    assert _paths(after) == ["flywheel.md"] and "flywheel" in after[0].terms


def test_word_statistics_are_kept_for_a_fresh_process_until_the_collection_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    db = str(tmp_path / "db")
    index_into(db, root, "c", encoder="none")
    query = str(_write(tmp_path / "query.txt", "txt", ["The flywheel and the strainer wore out."]))
    kept = cache_file(db, "c", "termstats")
    assert kept is not None and not kept.exists()
    counted = collection_stats(Retriever("c", db=db).store)
    first = Retriever("c", db=db).similar(query, k=3, mode="lexical")
    assert kept.is_file()

    def no_counting(texts: object) -> TermStats:
        raise AssertionError("the word statistics were counted again")

    _stats.cache_clear()  # what a fresh process starts with
    with monkeypatch.context() as patched:
        patched.setattr(TermStats, "of", no_counting)
        assert collection_stats(Retriever("c", db=db).store) == counted
        again = Retriever("c", db=db).similar(query, k=3, mode="lexical")
    assert [(h.path, h.terms) for h in again] == [(h.path, h.terms) for h in first]

    (root / "flywheel.md").write_text("The flywheel cracked; the flywheel was replaced.\n")
    index_into(db, root, "c", encoder="none")
    _stats.cache_clear()
    changed = Retriever("c", db=db).similar(query, k=1, mode="lexical")  # counted again
    assert _paths(changed) == ["flywheel.md"] and "flywheel" in changed[0].terms
    recounted = collection_stats(Retriever("c", db=db).store)
    assert recounted.documents == counted.documents + 1

    kept.write_bytes(b"not statistics")  # a damaged file is counted again, and replaced
    _stats.cache_clear()
    assert collection_stats(Retriever("c", db=db).store) == recounted
    _stats.cache_clear()
    with monkeypatch.context() as patched:
        patched.setattr(TermStats, "of", no_counting)
        assert collection_stats(Retriever("c", db=db).store) == recounted

    Database(db).drop_collection("c")
    assert not kept.exists()


@pytest.mark.skipif(running_as_root(), reason="root writes where chmod forbids")
def test_a_database_folder_it_cannot_write_to_keeps_no_statistics(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _corpus(root)
    db = tmp_path / "db"
    index_into(str(db), root, "c", encoder="none")
    db.chmod(0o555)
    try:
        hits = Retriever("c", db=str(db)).similar(str(root / "report.md"), k=1, mode="lexical")
    finally:
        db.chmod(0o755)
    assert _paths(hits) == ["report_copy.txt"]
    assert not list(db.glob(".c.*.cache*"))


def test_explanations_name_shared_terms_and_the_page_of_each_passage(
    collection: tuple[Path, str], tmp_path: Path
) -> None:
    _, db = collection
    query = _write(tmp_path / "query.pdf", "pdf", PUMP[:2])
    hits = Retriever("c", db=db).similar(str(query), k=6, mode="lexical")
    manual = next(h for h in hits if h.path.endswith("manual.pdf"))
    assert manual.pages == "3"  # the manual's pump page, not its filler pages
    assert manual.query_passage is not None and manual.query_passage.pages == "2"
    assert manual.terms, "a result must say which key terms it shares"
    query_words = set(words(" ".join([ELSEWHERE, *PUMP[:2]])))
    manual_words = set(words(" ".join([FILLER, OTHERS["ferry.md"], *PUMP[:2]])))
    assert set(manual.terms) <= query_words & manual_words  # held by both documents
    assert {"coolant", "cavitation"} <= set(manual.terms)
    for passage in (manual, manual.query_passage):  # the pair holds the key terms
        assert {"coolant", "cavitation"} <= set(words(passage.text))
        assert "**cavitation**" in passage.snippet.marked()
    weights = list(manual.terms.values())
    assert weights == sorted(weights, reverse=True)
    unrelated = next(h for h in hits if h.path.endswith("bakery.md"))
    assert not set(unrelated.terms) & {"impeller", "cavitation", "pump"}


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_with_vectors_the_passage_pairs_are_the_best_matching_chunks(
    collection: tuple[Path, str], tmp_path: Path, mode: str
) -> None:
    _, db = collection
    query = _write(tmp_path / "query.pdf", "pdf", PUMP[:2])
    hits = Retriever("c", db=db).similar(str(query), k=6, mode=mode)
    manual = next(h for h in hits if h.path.endswith("manual.pdf"))
    best = manual.pairs[0]
    assert best.by == "vectors"
    assert (best.query.pages, best.match.pages) == ("2", "3")  # the pump page of each
    assert best.query.path == str(query.absolute())
    assert {"coolant", "cavitation"} <= set(words(best.match.text))
    assert "**cavitation**" in best.match.snippet.marked()  # shared terms marked
    assert (manual.query_passage, manual.passages) == (
        best.query,
        tuple(p.match for p in manual.pairs),
    )
    scores = [pair.score for pair in manual.pairs]
    assert scores == sorted(scores, reverse=True) and 0.0 < scores[0] <= 1.0 + 1e-5
    for side in ("query", "match"):  # no chunk in two pairs
        ids = [getattr(pair, side).chunk_id for pair in manual.pairs]
        assert len(ids) == len(set(ids))
    shown = manual.as_dict()["pairs"][0]
    assert (shown["by"], shown["query"]["pages"], shown["match"]["pages"]) == ("vectors", "2", "3")
    assert shown["score"] == pytest.approx(best.score)


def test_chunk_matching_scores_coverage_and_pairs_each_chunk_once() -> None:
    # 3 query chunks x 2 document chunks; cosines as if from unit vectors
    match = ChunkMatch(np.array([[0.9, 0.2], [0.8, 0.7], [0.1, 0.3]], dtype=np.float32))
    assert match.score() == pytest.approx((0.9 + 0.8 + 0.3) / 3, abs=1e-6)
    # 0.9 takes query chunk 0 and document chunk 0; 0.8 and 0.2 reuse one of them
    assert [(q, d) for q, d, _ in match.pairs()] == [(0, 0), (1, 1)]
    assert match.pairs(limit=1)[0][2] == pytest.approx(0.9, abs=1e-6)
    weak = ChunkMatch(np.array([[0.9, 0.0], [0.0, 0.5]], dtype=np.float32))
    assert len(weak.pairs()) == 1  # 0.5 is under PAIR_SHARE of 0.9
    unit = np.eye(3, dtype=np.float32)
    assert ChunkMatch.of(unit, unit[:2]).score() == pytest.approx(2 / 3, abs=1e-6)


def test_the_chunk_leg_ranks_by_chunk_matches(collection: tuple[Path, str]) -> None:
    root, db = collection
    rule = Fusion("maxnorm", {"chunk_dense": 1.0})
    hits = Retriever("c", db=db).similar(str(root / "report.md"), k=3, mode="vector", rule=rule)
    assert _paths(hits)[0] == "report_copy.txt"
    leg = [h.scores["chunk_dense"]["score"] for h in hits]
    assert [h.scores["fused"]["score"] for h in hits] == leg  # the one weighted leg
    assert leg == sorted(leg, reverse=True) and leg[0] > 0.9  # chunk for chunk near copies


def test_cli_text_and_json_show_terms_and_pages(
    collection: tuple[Path, str], tmp_path: Path
) -> None:
    root, db = collection
    runner = CliRunner()
    args = ["similar", str(root / "report.md"), "--db", db, "-c", "c", "--mode", "lexical"]
    text = runner.invoke(app, [*args, "-k", "2"])
    assert text.exit_code == 0, text.output
    assert text.output.startswith("1. ")
    assert "report_copy.txt" in text.output.splitlines()[1]
    assert "shared terms: " in text.output and "this document p. 1:" in text.output
    assert "pair 1 (shared terms):" in text.output
    raw = runner.invoke(app, [*args, "--json"])
    assert raw.exit_code == 0, raw.output
    hits = json.loads(raw.output)
    assert Path(hits[0]["path"]).name == "report_copy.txt"
    assert hits[0]["terms"][0] == "strainer"  # 3 times in each, in no other document
    assert hits[0]["pages"] == "1" and hits[0]["query_passage"]["pages"] == "1"
    assert [p["by"] for p in hits[0]["pairs"]] == ["terms"]
    dense = runner.invoke(app, [*args[:-2], "--mode", "vector", "-k", "1"])
    assert dense.exit_code == 0, dense.output
    assert "pair 1 (cosine " in dense.output and "this document p. 1:" in dense.output
    assert all(not h["path"].endswith("report.md") for h in hits)


def _bad_inputs(tmp_path: Path) -> list[tuple[Path, str]]:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.md").write_text("   \n\n  ")
    (tmp_path / "dashes.txt").write_text("---- !!! ____\n")
    (tmp_path / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj garbage\x00\xff" * 3)
    (tmp_path / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    (tmp_path / "sheet.numbers").write_bytes(b"PK\x03\x04")
    cases = [
        (tmp_path / "empty.txt", "empty"),
        (tmp_path / "blank.md", "empty file"),
        (tmp_path / "dashes.txt", "has no words to compare"),
        (tmp_path / "corrupt.pdf", "PDF"),
        (tmp_path / "sheet.xlsx", "corrupt XLSX"),
        (tmp_path / "sheet.numbers", "unsupported file type"),
        (tmp_path / "missing.txt", "neither a file nor a document"),
        (tmp_path, "is a folder"),
    ]
    if not running_as_root():  # root reads whatever chmod forbids
        locked = tmp_path / "locked.txt"
        locked.write_text("you cannot read me")
        locked.chmod(0)
        cases.append((locked, "unreadable"))
    return cases


def test_an_empty_or_unreadable_query_file_is_one_clear_error(
    collection: tuple[Path, str], tmp_path: Path
) -> None:
    _, db = collection
    runner = CliRunner()
    for path, reason in _bad_inputs(tmp_path):
        with pytest.raises(UsageError, match=reason):
            Retriever("c", db=db).similar(str(path), mode="lexical")
        result = runner.invoke(app, ["similar", str(path), "--db", db, "-c", "c"])
        assert result.exit_code == 2, (path, result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and reason in errors[0], (path, result.output)
        assert "Traceback" not in result.output


def test_a_collection_from_before_ocr_answers(tmp_path: Path) -> None:
    from docsearch.store.reads import Store
    from docsearch.store.writes import Writer

    root = tmp_path / "docs"
    _corpus(root)
    db = str(tmp_path / "db")
    index_into(db, root, "c", options={"max_tokens": 40})
    Writer(Store.open(db, "c")).chunks.drop_columns(["ocr"])  # as an older docsearch wrote it
    for mode in ("lexical", "hybrid"):
        hits = Retriever("c", db=db).similar(str(root / "report.md"), k=2, mode=mode)
        assert _paths(hits)[0] == "report_copy.txt"
        assert not hits[0].ocr and not hits[0].pairs[0].query.ocr


def test_key_terms_weigh_rarity_and_repetition() -> None:
    stats = TermStats.of(["pump seal report", "pump ferry report", "pump bakery", "garden"])
    terms = dict(stats.key_terms("pump pump seal seal seal ferry unseen", limit=10))
    assert "unseen" not in terms  # no document holds it: it could match nothing
    assert terms["seal"] > terms["ferry"]  # as rare, written more often
    assert terms["ferry"] > terms["pump"]  # as often written... (1 vs 2), but far rarer
    only = stats.key_terms("pump seal report", limit=3, min_df=2)
    assert [t for t, _ in only] == ["report", "pump"]  # "seal": only the query holds it
    assert len(stats.key_terms("pump seal ferry bakery", limit=2)) == 2


def test_eval_similar_reads_each_query_as_a_document(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    corpus = {"report": " ".join(PUMP), **{n.split(".")[0]: t for n, t in OTHERS.items()}}
    with (folder / "corpus.jsonl").open("w") as out:
        for doc_id, text in corpus.items():
            out.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    queries = {"q1": " ".join(PUMP).replace("four", "five"), "q2": OTHERS["ferry.md"] * 3}
    with (folder / "queries.jsonl").open("w") as out:
        for qid, text in queries.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\treport\t1\nq2\tferry\t1\n")
    args = ["eval", str(folder), "--split", "all", "--encoder", "none", "--mode", "lexical"]
    result = CliRunner().invoke(app, [*args, "--similar", "--json"])
    assert result.exit_code == 0, result.output
    scored = json.loads(result.output[result.output.index("{") :])
    assert scored["mode"] == "similar lexical"
    assert scored["metrics"]["ndcg@10"] == pytest.approx(1.0)


def test_rows_and_vectors_read_the_rows_and_vectors_that_rows_reads(
    collection: tuple[Path, str],
) -> None:
    _, db = collection
    store = Retriever("c", db=db).store
    where = "ordinal >= 0"
    rows, vectors = store.rows_and_vectors(where, ["id", "doc_id", "ordinal"])
    plain = store.rows(where, ["id", "doc_id", "ordinal", "vector"])
    assert vectors.dtype == np.float32 and vectors.shape == (len(plain), len(plain[0]["vector"]))
    assert rows == [{k: v for k, v in row.items() if k != "vector"} for row in plain]
    np.testing.assert_array_equal(vectors, np.asarray([r["vector"] for r in plain], np.float32))
