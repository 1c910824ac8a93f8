"""Incremental indexing on the real LanceDB store with the hashing fake encoder."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from docsearch.errors import EncoderMismatchError
from docsearch.indexer.pipeline import IndexReport, token_batches
from docsearch.store.reads import Store
from tests.fakes import CALLS
from tests.helpers import bad_folder, documents, index_into, make_pdf


def corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "msa.md").write_text(
        "# Services Agreement\n\n## 7. Termination\n\n7.2 Either party may terminate for cause "
        "under Section 7.2(a) after thirty days.\n\n## 9. Security\n\nISO 13485:2016 applies.\n"
    )
    (root / "nda.txt").write_text("Mutual confidentiality.\n\nObligations survive five years.\n")
    make_pdf(root / "manual.pdf", ["Pump alarms and error codes.", "Motor stall code E-MOT-21."])
    (root / "sub").mkdir(exist_ok=True)
    (root / "sub" / "guide.md").write_text("# Guideline\n\nMeasure blood pressure twice.\n")
    return root


def run(root: Path, db: str, name: str = "c", **kw) -> IndexReport:  # type: ignore[no-untyped-def]
    return index_into(db, root, name, **{"options": {"max_tokens": 12}, **kw})


def embedded_texts() -> int:
    return CALLS["texts"]


def chunk_paths(db: str, name: str = "c") -> dict[str, int]:
    store = Store.open(db, name)
    counts: dict[str, int] = {}
    for row in store.rows("ordinal >= 0", ["path"]):
        counts[Path(row["path"]).name] = counts.get(Path(row["path"]).name, 0) + 1
    return counts


def doc_rows(db: str, name: str = "c") -> dict[str, dict]:
    """The docs table by file name (each row checked against its file's chunks)."""
    return {Path(path).name: row for path, row in documents(db, name).items()}


def test_first_run_indexes_everything(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    report = run(root, db)
    assert report.new == 4 and not report.failed
    assert report.chunks_embedded == report.chunks_written > 4
    assert set(chunk_paths(db)) == {"msa.md", "nda.txt", "manual.pdf", "guide.md"}
    docs = doc_rows(db)
    assert {name: row["n_chunks"] for name, row in docs.items()} == chunk_paths(db)
    assert (docs["manual.pdf"]["page_start"], docs["manual.pdf"]["page_end"]) == (1, 2)


def test_unchanged_folder_embeds_nothing(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    before = embedded_texts()
    report = run(root, db)
    assert (report.unchanged, report.chunks_embedded, report.chunks_written) == (4, 0, 0)
    assert embedded_texts() == before


def test_touched_file_with_same_bytes_embeds_nothing(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    later = time.time() + 10
    os.utime(root / "nda.txt", (later, later))
    report = run(root, db)
    assert report.touched == 1 and report.chunks_embedded == 0
    assert run(root, db).unchanged == 4  # the new mtime was recorded


def test_changed_file_reembeds_only_its_changed_chunks(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    before = chunk_paths(db)
    docs_before = doc_rows(db)
    with (root / "nda.txt").open("a") as handle:
        handle.write("\nA brand new clause about audits and inspections appears.\n")
    report = run(root, db)
    docs = doc_rows(db)  # the nda's row is replaced, the others are kept as they were
    assert "audits and inspections" in docs["nda.txt"]["text"]
    assert docs["nda.txt"]["vector"] != docs_before["nda.txt"]["vector"]
    assert {k: v for k, v in docs.items() if k != "nda.txt"} == {
        k: v for k, v in docs_before.items() if k != "nda.txt"
    }
    assert report.changed == 1 and report.unchanged == 3
    after = chunk_paths(db)
    assert after["nda.txt"] >= before["nda.txt"]
    assert {k: v for k, v in after.items() if k != "nda.txt"} == {
        k: v for k, v in before.items() if k != "nda.txt"
    }
    # Only the nda's new or changed chunks were embedded; its unchanged first chunk was reused.
    assert 1 <= report.chunks_embedded <= after["nda.txt"]
    assert report.chunks_embedded + report.chunks_reused == after["nda.txt"]


def test_deleted_file_vanishes_from_store_and_results(tmp_path: Path) -> None:
    from docsearch.retriever import Retriever

    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    assert (
        Retriever("c", db=db)
        .search("E-MOT-21 motor stall", mode="lexical")[0]
        .path.endswith("manual.pdf")
    )
    (root / "manual.pdf").unlink()
    report = run(root, db)
    assert report.deleted == 1
    assert "manual.pdf" not in chunk_paths(db)
    assert set(doc_rows(db)) == {"msa.md", "nda.txt", "guide.md"}
    assert "manual.pdf" not in Store.open(db, "c").file_records().__repr__()
    hits = Retriever("c", db=db).search("E-MOT-21 motor stall", mode="lexical")
    assert all(not h.path.endswith("manual.pdf") for h in hits)


def test_renamed_file_is_not_reembedded(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    before, docs_before = chunk_paths(db), doc_rows(db)
    (root / "msa.md").rename(root / "sub" / "services-agreement.md")
    report = run(root, db)
    assert (report.renamed, report.deleted, report.chunks_embedded) == (1, 0, 0)
    after = chunk_paths(db)
    assert "msa.md" not in after
    assert after["services-agreement.md"] == before["msa.md"]
    docs = doc_rows(db)
    assert "msa.md" not in docs
    moved, old = docs["services-agreement.md"], docs_before["msa.md"]
    assert (moved["text"], moved["vector"]) == (old["text"], old["vector"])
    assert moved["doc_id"] != old["doc_id"]  # a document is its path


def test_bad_files_are_reported_and_the_rest_indexed(tmp_path: Path) -> None:
    expected = bad_folder(tmp_path / "bad")
    db = str(tmp_path / "db")
    report = run(tmp_path / "bad", db)
    failed = {Path(p).name: reason for p, reason in report.failed}
    assert set(failed) == set(expected)
    for name, fragment in expected.items():
        assert fragment.lower() in failed[name].lower(), (name, failed[name])
    assert report.exit_code == 3
    assert set(chunk_paths(db)) == {"good.md", "good.pdf"}
    assert set(doc_rows(db)) == {"good.md", "good.pdf"}
    records = Store.open(db, "c").file_records()
    assert {Path(p).name for p, r in records.items() if r.status == "failed"} == set(expected)


def test_a_file_that_turns_bad_keeps_serving_its_last_good_version(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    before, served = chunk_paths(db)["nda.txt"], doc_rows(db)["nda.txt"]
    (root / "nda.txt").write_bytes(bytes(range(256)) * 4)
    report = run(root, db)
    assert [Path(p).name for p, _ in report.failed] == ["nda.txt"]
    assert "previously indexed version" in report.failed[0][1]
    assert chunk_paths(db)["nda.txt"] == before
    assert len(run(root, db).failed) == 1  # still bad: still reported, still served
    assert chunk_paths(db)["nda.txt"] == before
    assert doc_rows(db)["nda.txt"] == served
    (root / "nda.txt").write_text("Mutual confidentiality, repaired.\n")
    assert run(root, db).changed == 1
    assert doc_rows(db)["nda.txt"]["text"] == "Mutual confidentiality, repaired."


def test_include_and_exclude_globs(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db, include=["*.md"], exclude=["sub/*"])
    assert set(chunk_paths(db)) == {"msa.md"}


def test_reopening_with_another_encoder_is_refused(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    run(root, db)
    with pytest.raises(EncoderMismatchError, match="collections drop c"):
        run(root, db, options={"max_tokens": 12, "dim": 32})
    with pytest.raises(EncoderMismatchError):
        run(root, db, encoder="none")


def test_lexical_only_collection_has_no_vectors(tmp_path: Path) -> None:
    from docsearch.retriever import Retriever

    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    report = run(root, db, name="lex", encoder="none", options={})
    assert report.chunks_embedded == 0 and report.chunks_written >= 4
    retriever = Retriever("lex", db=db)
    assert retriever.default_mode() == "lexical"
    assert retriever.search("blood pressure")[0].path.endswith("guide.md")


def test_token_batches_respect_the_padded_budget() -> None:
    lengths = [5, 100, 30, 100, 7, 60]
    batches = list(token_batches(lengths, budget=200))
    assert sorted(i for b in batches for i in b) == list(range(6))
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 200 or len(batch) == 1
    assert batches[0] == [1, 3]  # longest first


def test_symlinks_leading_out_of_the_folder_are_skipped_and_reported(tmp_path: Path) -> None:
    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    secret = tmp_path / "secret.txt"
    secret.write_text("Private salary list.\n")
    (root / "link-out.txt").symlink_to(secret)
    (root / "link-in.md").symlink_to(root / "msa.md")
    report = run(root, db)
    assert ("link-out.txt" not in chunk_paths(db)) and "link-in.md" in chunk_paths(db)
    assert [(Path(p).name, w) for p, w in report.warnings] == [
        ("link-out.txt", "skipped: symlink to a file outside the folder")
    ]


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreadable file is reported with the OS reason; the rest of the folder is indexed."""
    from tests.helpers import running_as_root

    root, db = corpus(tmp_path / "docs"), str(tmp_path / "db")
    locked = root / "locked.md"
    locked.write_text("# Locked\n\nNo access.\n")
    if running_as_root():  # chmod does not stop root: make the read fail the way the OS would
        real = Path.open

        def open_file(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self.name == "locked.md":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", open_file)
    else:
        locked.chmod(0)
    report = run(root, db)
    assert [(Path(p).name, r) for p, r in report.failed] == [
        ("locked.md", "unreadable: Permission denied")
    ]
    assert report.new == 4
