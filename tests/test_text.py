"""Words have one home: `docsearch.text` owns the word patterns, stemming, stop words and
identifiers, and no other module of the product compiles a word pattern or lists stop words."""

from __future__ import annotations

import ast
from pathlib import Path

import docsearch
from docsearch.text import content_stems, identifiers, index_words, stem

PACKAGE = Path(docsearch.__file__).parent
WORD_PATTERNS = {r"\w+", r"[^\W_]+"}


def _word_patterns(tree: ast.AST) -> list[str]:
    """The word patterns a module compiles (re.compile of one of WORD_PATTERNS)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "compile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in WORD_PATTERNS
        ):
            found.append(node.args[0].value)
    return found


def _names_assigned(tree: ast.AST) -> set[str]:
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_only_the_text_module_compiles_word_patterns_or_lists_stop_words() -> None:
    elsewhere = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "text.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        patterns = _word_patterns(tree)
        if "STOPWORDS" in _names_assigned(tree):
            patterns.append("STOPWORDS")
        if patterns:
            elsewhere[str(path.relative_to(PACKAGE))] = patterns
    assert not elsewhere, f"word patterns or stop words outside docsearch/text.py: {elsewhere}"


def test_the_text_module_splits_stems_and_finds_identifiers() -> None:
    assert index_words("Snake_case Terminated ÉTÉ") == ["snake", "case", "terminated", "été"]
    assert index_words("x" * 41 + " kept") == ["kept"]  # the index drops tokens over 40 chars
    assert stem("Termination") == stem("terminate")
    assert content_stems("the termination of Section 7.2(a)") == {stem("termination"), "section"}
    assert identifiers("Section 7.2(a) and section 7.2(A), ISO 13485:2016") == (
        "7.2(a)",
        "13485:2016",
    )


def test_distinct_words_are_the_word_patterns_matches_in_any_script() -> None:
    """`distinct_words` (ASCII separators translated away in C) finds exactly the distinct WORD
    matches: random strings mixing ASCII punctuation with curly quotes, section signs, CJK,
    Arabic digits, superscripts, non-breaking and zero-width spaces and control characters."""
    import random

    from docsearch.text import WORD, distinct_words

    alphabet = list("abcXYZ019_ .,;:'\"-()\n\t§’“”é漢字\xa0\u2003\u200b٣²½ßİ\x1c\x1f\x00")
    rng = random.Random(20261206)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert distinct_words(text) == set(WORD.findall(text)), repr(text)
    assert distinct_words("Clause 7.2(a): the Licensee’s “Net Sales”") == {
        "Clause", "7", "2", "a", "the", "Licensee", "s", "Net", "Sales"
    }  # fmt: skip
