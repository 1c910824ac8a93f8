"""The folder tokenizer against transformers' own, token for token, on MiniLM's real folder and
the tiny generic one; which folders it takes; and that shaping a batch on one thread never
leaks into counting on another."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from docsearch.encoders.folder_tokenizer import FolderTokenizer, load_tokenizer
from docsearch.encoders.weights import resolve_model

TEXTS = [
    "",
    " ",
    "The Supplier shall indemnify the Customer under Section 7.2(a)-(c), ISO 13485:2016.",
    "Café naïve résumé, Ünïcödé and İstanbul; ß, ΣΑΣ, ǅ",
    "中文字符测试 and 日本語のテキスト",
    "emoji 😀 and a zero\u200bwidth space, tab\tnew\nline\x00control",
    "Ａｌｐｈａ full-width and the ﬁ ligature",
    "patients received a daily dose " * 90,  # past every window below
    "unbelievably antidisestablishmentarianism pneumonoultramicroscopic",
]


def _minilm() -> Path:
    return resolve_model("all-MiniLM-L6-v2")


def _theirs(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module", params=["minilm", "tiny"])
def pair(request: pytest.FixtureRequest, tiny_st: Path) -> tuple[FolderTokenizer, Any]:
    folder = _minilm() if request.param == "minilm" else tiny_st
    ours = FolderTokenizer.of(folder)
    assert ours is not None
    return ours, _theirs(folder)


def test_counts_and_offsets_are_transformers_own(pair: tuple[FolderTokenizer, Any]) -> None:
    ours, theirs = pair
    plain = {"add_special_tokens": False, "verbose": False}
    assert ours(TEXTS, **plain)["input_ids"] == theirs(TEXTS, **plain)["input_ids"]
    for text in TEXTS:
        mine = ours(text, return_offsets_mapping=True, **plain)
        reference = theirs(text, return_offsets_mapping=True, **plain)
        assert mine["input_ids"] == reference["input_ids"]
        assert [tuple(o) for o in mine["offset_mapping"]] == [
            tuple(o) for o in reference["offset_mapping"]
        ]
    assert ours("")["input_ids"] == theirs("")["input_ids"]  # the special tokens alone
    assert ours.model_max_length == theirs.model_max_length


@pytest.mark.parametrize("limit", [8, 128, 256])
def test_padded_and_truncated_batches_are_transformers_own(
    pair: tuple[FolderTokenizer, Any], limit: int
) -> None:
    ours, theirs = pair
    shaped = {"padding": True, "truncation": "longest_first", "max_length": limit}
    mine = ours(TEXTS, return_tensors="pt", **shaped)
    reference = theirs(TEXTS, return_tensors="pt", **shaped)
    assert set(mine) == set(reference)
    for key in mine:
        assert torch.equal(mine[key], reference[key]), key
    assert mine["input_ids"].shape[1] <= limit


def test_shaping_one_batch_never_reaches_counting_on_another_thread() -> None:
    ours = FolderTokenizer.of(_minilm())
    assert ours is not None
    expected = ours(TEXTS, add_special_tokens=False)["input_ids"]
    wrong: list[object] = []
    stop = threading.Event()

    def shape() -> None:
        while not stop.is_set():
            ours(TEXTS, padding=True, truncation=True, max_length=8, return_tensors="pt")

    thread = threading.Thread(target=shape)
    thread.start()
    try:
        for _ in range(200):
            found = ours(TEXTS, add_special_tokens=False)["input_ids"]
            if found != expected:
                wrong.append(found)
    finally:
        stop.set()
        thread.join()
    assert not wrong
    assert max(len(ids) for ids in expected) > 8  # truncation would have shown


def _copy(tmp_path: Path, **config: object) -> Path:
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(_minilm() / name, folder / name)
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return folder


def test_a_folder_whose_config_changes_the_normalizer_goes_to_transformers(
    tmp_path: Path,
) -> None:
    """transformers rebuilds a BERT normalizer that disagrees with the config: cased here."""
    folder = _copy(tmp_path, do_lower_case=False)
    assert FolderTokenizer.of(folder) is None
    loaded = load_tokenizer(folder)
    assert not isinstance(loaded, FolderTokenizer)
    assert (
        loaded("Supplier", add_special_tokens=False)["input_ids"]
        != (load_tokenizer(_minilm())("Supplier", add_special_tokens=False)["input_ids"])
    )


@pytest.mark.parametrize(
    "change",
    [
        {"tokenizer_class": "RobertaTokenizer"},
        {"pad_token": None},
        {"model_input_names": ["input_ids", "position_ids"]},
        {"drop": True},
    ],
)
def test_folders_it_does_not_take(tmp_path: Path, change: dict[str, object]) -> None:
    if change.get("drop"):
        folder = _copy(tmp_path)
        (folder / "tokenizer.json").unlink()
    else:
        folder = _copy(tmp_path, **change)
    assert FolderTokenizer.of(folder) is None


def test_what_it_does_not_do_is_refused() -> None:
    ours = FolderTokenizer.of(_minilm())
    assert ours is not None
    with pytest.raises(ValueError, match="only_second"):
        ours(TEXTS, truncation="only_second", max_length=8)
    with pytest.raises(ValueError, match="np"):
        ours(TEXTS, padding=True, return_tensors="np")
    with pytest.raises(TypeError):
        ours(TEXTS, stride=2)  # type: ignore[call-arg]


def test_it_pickles_and_copies_models_that_hold_it() -> None:
    import copy
    import pickle

    ours = FolderTokenizer.of(_minilm())
    assert ours is not None
    back = pickle.loads(pickle.dumps(ours))
    assert back(TEXTS, add_special_tokens=False) == ours(TEXTS, add_special_tokens=False)
    assert back.model_input_names == ours.model_input_names
    holder = {"tokenizer": ours, "weights": [1.0]}
    copied = copy.deepcopy(holder)
    assert copied["tokenizer"] is ours and copied["weights"] is not holder["weights"]
