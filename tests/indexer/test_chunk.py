from __future__ import annotations

import re

import pytest

from docsearch.indexer.chunk import Chunker, ChunkerSettings, HeadingIndex, heading_level
from docsearch.indexer.extract import build_document

WORD = re.compile(r"\w+")


def words(texts):  # type: ignore[no-untyped-def]
    return [len(WORD.findall(t)) for t in texts]


def spans(text):  # type: ignore[no-untyped-def]
    return [m.span() for m in WORD.finditer(text)]


def chunker(max_tokens: int, overlap: int = 0) -> Chunker:
    return Chunker(ChunkerSettings(max_tokens, overlap), words, spans)


CONTRACT = """# Master Agreement

ARTICLE 7 TERMINATION

7.1 Term. This agreement lasts five years unless ended earlier. It renews automatically each year.

7.2 Termination for Cause. Either party may terminate on thirty days notice if the other party breaches. The notice must be in writing. Cure periods apply as stated in Section 7.2(a).

ARTICLE 8 MISCELLANEOUS

8.1 Notices go to the addresses above."""


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("# Title", 1),
        ("### Deep", 3),
        ("ARTICLE 7 TERMINATION", 1),
        ("Article IV", 1),
        ("7.2 Termination for Cause. Either party may", 2),
        ("Section 7 Termination", 1),
        ("DEFINITIONS", 1),
        ("The parties agree as follows.", 0),
        ("7 days later the notice arrived", 0),
    ],
)
def test_heading_level(line: str, level: int) -> None:
    assert heading_level(line) == level


def test_a_document_that_fits_is_one_chunk() -> None:
    doc = build_document("c.md", "c", [CONTRACT])
    chunks = chunker(1000).chunk(doc)
    assert len(chunks) == 1
    assert chunks[0].text == CONTRACT.strip()
    assert (chunks[0].char_start, chunks[0].char_end) == (0, len(CONTRACT))


def test_splits_respect_budget_structure_and_spans() -> None:
    doc = build_document("c.md", "c", [CONTRACT])
    chunks = chunker(30).chunk(doc)
    assert all(c.n_tokens <= 30 for c in chunks)
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in chunks)
    # The articles are cut apart: no chunk holds text of both.
    assert not any("7.2" in c.text and "8.1" in c.text for c in chunks)
    art8 = next(c for c in chunks if "8.1 Notices" in c.text)
    assert art8.heading_path.startswith("ARTICLE 8 MISCELLANEOUS")
    every_word = " ".join(c.text for c in chunks)
    assert set(WORD.findall(CONTRACT)) == set(WORD.findall(every_word))


def test_heading_path_nests_numbered_clauses() -> None:
    index = HeadingIndex(CONTRACT)
    offset = CONTRACT.index("Either party")
    assert index.path_at(offset) == "ARTICLE 7 TERMINATION > 7.2 Termination for Cause."
    assert index.path_at(0) == "Master Agreement"


def test_pages_of_chunks() -> None:
    doc = build_document("p.pdf", "p", ["alpha beta gamma. " * 10, "delta epsilon. " * 10])
    chunks = chunker(12).chunk(doc)
    assert chunks[0].page_start == 1
    assert chunks[-1].page_end == 2
    assert any(c.page_start == 1 and c.page_end == 2 for c in chunks) or all(
        c.page_start == c.page_end for c in chunks
    )


def test_text_without_boundaries_falls_back_to_token_windows() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    chunks = chunker(16).chunk(build_document("x", "x", [text]))
    assert [c.n_tokens for c in chunks] == [16] * 6 + [4]
    assert not any(c.truncated for c in chunks)


def test_overlap_repeats_trailing_sentences() -> None:
    text = " ".join(f"Sentence number {i} ends here." for i in range(12))
    plain = chunker(20).chunk(build_document("x", "x", [text]))
    overlapped = chunker(20, overlap=6).chunk(build_document("x", "x", [text]))
    assert len(overlapped) > len(plain)
    first, second = overlapped[0], overlapped[1]
    assert second.char_start < first.char_end  # shares text with its predecessor
    assert all(c.n_tokens <= 20 for c in overlapped)


def test_empty_document_has_no_chunks() -> None:
    assert chunker(10).chunk(build_document("e", "e", ["  \n "])) == []


def test_windows_are_recounted_whole_when_seams_add_tokens() -> None:
    """Subword tokenizers may count a joined window higher than its pieces; no chunk may overshoot."""

    def seams(texts):  # type: ignore[no-untyped-def]
        return [len(WORD.findall(t)) + t.count("\n") for t in texts]  # each line break costs one

    text = "\n".join(f"Line {i} has five words" for i in range(40))
    split = Chunker(ChunkerSettings(20), seams, spans).chunk(build_document("x", "x", [text]))
    assert all(c.n_tokens <= 20 and not c.truncated for c in split)
    assert sum(len(WORD.findall(c.text)) for c in split) == 40 * 5
    one_line = " ".join(f"w{i}\n" for i in range(30))
    long = Chunker(ChunkerSettings(10), seams, spans).chunk(build_document("y", "y", [one_line]))
    assert all(c.n_tokens <= 10 for c in long)


LONG_CONTRACT = "\n\n".join(
    f"ARTICLE {a}\n\n"
    + "\n\n".join(
        f"{a}.{s} Clause. " + " ".join(f"Term {a} {s} {k} binds the parties." for k in range(9))
        for s in range(1, 6)
    )
    for a in range(1, 9)
)


def test_the_section_is_tokenized_once_while_splitting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splitting counts a piece by the section's token starts: the section's text goes through
    `token_spans` once (in blocks), and `count_tokens` sees each window once, not each level
    of the recursion; blocks of any size give the same chunks."""
    from docsearch.indexer import chunk as chunk_module

    spanned: list[int] = []
    counted: list[int] = []

    def counting_spans(text):  # type: ignore[no-untyped-def]
        spanned.append(len(text))
        return spans(text)

    def counting_words(texts):  # type: ignore[no-untyped-def]
        counted.append(sum(map(len, texts)))
        return words(texts)

    doc = build_document("x", "x", [LONG_CONTRACT])
    chunks = Chunker(ChunkerSettings(40), counting_words, counting_spans).chunk(doc)
    assert len(chunks) > 20 and all(c.n_tokens <= 40 for c in chunks)
    assert sum(spanned) == len(LONG_CONTRACT.strip())
    assert sum(counted) <= sum(len(c.text) for c in chunks)  # the windows, counted once
    monkeypatch.setattr(chunk_module, "COUNT_BLOCK_CHARS", 97)
    small_blocks = chunker(40).chunk(doc)
    assert [(c.char_start, c.char_end, c.n_tokens) for c in small_blocks] == [
        (c.char_start, c.char_end, c.n_tokens) for c in chunks
    ]


def test_a_piece_counts_what_the_real_tokenizer_gives_it_alone() -> None:
    """MiniLM's WordPiece: for pieces cut at whitespace, the section's token starts inside a
    piece are exactly the tokens of the piece tokenized on its own."""
    from docsearch.encoders import get_encoder
    from docsearch.indexer.chunk import Span, TokenStarts, split_after

    encoder = get_encoder("sentence-transformers", precision="fp32")
    text = LONG_CONTRACT.replace("binds", "indemnifies, notwithstanding §7.2(a)-(c),")
    pieces = split_after(r"\s", text, Span(0, len(text)))[::7]
    found = TokenStarts(text, encoder.token_spans).count(pieces)
    assert found == encoder.count_tokens([text[p.start : p.end] for p in pieces])
    assert sum(found) > len(pieces)  # the pieces hold several tokens each
