"""Search filters: which chunks a search may return, one typed value compiled to SQL here.

    ChunkFilter(path="contracts/*.pdf", where="page_start >= 3")

`path` (a glob) and `paths` (exact paths, the UI's type and date filters) are docsearch's own
clauses. `where` is the caller's SQL over chunk columns and may be untrusted (an API request, a
LangChain or LlamaIndex call an LLM wrote), so it is checked token by token against a small
language: the chunk columns, string and number literals, comparisons, `+ - *`, AND/OR/NOT,
IS [NOT] NULL, [NOT] IN/LIKE/ILIKE/BETWEEN and `lower()`/`upper()`. Anything else is refused
with a UsageError that names it: `;`, comments, quoted identifiers, sub-selects, other functions,
unknown columns, unbalanced parentheses, unterminated strings. The SQL handed to Lance is rebuilt
from the checked tokens, so Lance parses exactly what was checked, and the caller's expression
sits in its own parentheses after docsearch's clauses: no `where` can widen them. (Lance stops
reading a filter at the first token that does not continue the expression, so `1=1) OR (1=1`
would otherwise have ended the parenthesis early and ORed past the path clause.)
Not here: type checks (`page_start = 'abc'` is left to Lance; the store turns its error into a
UsageError), running filters (store.py). A collection is its own pair of tables, not a clause.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from docsearch.errors import UsageError

# The chunks table's columns a filter may name (its schema less the vector; a test keeps the two
# in step). Lance's own row-address columns (_rowid...) are not offered.
FILTER_COLUMNS = frozenset(
    "id doc_id path title text ordinal page_start page_end char_start char_end heading_path "
    "n_tokens truncated file_sha256 text_sha ocr part location email_subject email_from email_to "
    "email_date page_breaks".split()
)
KEYWORDS = frozenset("AND OR NOT IS NULL TRUE FALSE IN LIKE ILIKE BETWEEN".split())
FUNCTIONS = frozenset({"lower", "upper"})  # case-insensitive matching; nothing that can fail
MAX_WHERE_CHARS = 10_000
MAX_NESTING = 20  # Lance's parser gives up near 50 levels; our own wrapping adds one

_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+)
      | (?P<string>'(?:[^']|'')*')
      | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<comment>--|/\*)
      | (?P<op><=|>=|<>|!=|[=<>+\-*])
      | (?P<paren>[(),])
    """,
    re.VERBOSE,
)
# Characters with a meaning of their own in SQL that a filter has no use for.
_REFUSED = {
    ";": "';' is not allowed: a filter is one expression",
    "'": "unterminated string literal",
    '"': "quoted identifiers are not allowed: write column names bare",
    "`": "quoted identifiers are not allowed: write column names bare",
    "/": "operator '/' is not allowed (only + - *)",
    "%": "operator '%' is not allowed (only + - *)",
}


@dataclass(frozen=True)
class Token:
    kind: str  # string, number, word, op, paren
    text: str  # as written (for a string: with its quotes)
    at: int  # offset in the filter, for messages


def sql_str(value: str) -> str:
    """An SQL string literal. Lance reads backslashes literally, so only quotes need doubling."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


def glob_to_like(pattern: str) -> str:
    """A path glob ('contracts/*.pdf') as an SQL LIKE pattern; '**' and '*' both match any run.

    LIKE's own wildcards in the glob match themselves ('a_b.pdf' is not 'a-b.pdf'): Lance's LIKE
    escape character is the backslash.
    """
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("**", "*").replace("*", "%").replace("?", "_")


def bad_where(where: str, problem: str) -> UsageError:
    """The error for a refused filter: the filter (shortened) and what is wrong with it."""
    shown = where if len(where) <= 80 else where[:77] + "..."
    return UsageError(f"bad where filter {shown!r}: {problem}")


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc" and ch not in "\t\r\n"


def _check_text(where: str, what: str = "where filter") -> None:
    if len(where) > MAX_WHERE_CHARS:
        raise UsageError(
            f"{what} too long: {len(where):,} characters (the limit is {MAX_WHERE_CHARS:,})"
        )
    bad = next((ch for ch in where if _is_control(ch)), None)
    if bad is not None:
        raise UsageError(f"{what} contains the control character U+{ord(bad):04X}")
    try:
        where.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} contains a lone surrogate (not valid Unicode text)") from None


def tokens(where: str) -> Iterator[Token]:
    """The filter's tokens, whitespace dropped; UsageError at the first character we refuse."""
    at = 0
    while at < len(where):
        match = _TOKEN.match(where, at)
        if match is None:
            ch = where[at]
            problem = _REFUSED.get(ch, f"unexpected character {ch!r} at position {at}")
            raise bad_where(where, problem)
        kind = match.lastgroup or ""
        if kind == "comment":
            raise bad_where(where, "comments ('--', '/*') are not allowed")
        if kind != "space":
            yield Token(kind, match.group(), at)
        at = match.end()


def _check_nesting(where: str, toks: list[Token]) -> None:
    depth = 0
    for tok in toks:
        if tok.text == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise bad_where(where, f"parentheses nested deeper than {MAX_NESTING}")
        elif tok.text == ")":
            depth -= 1
            if depth < 0:
                raise bad_where(
                    where, f"unbalanced parentheses: ')' at position {tok.at} has no '('"
                )
    if depth:
        raise bad_where(where, f"unbalanced parentheses: {depth} '(' not closed")


def _render_word(where: str, tok: Token, following: Token | None) -> str:
    """A checked word as Lance gets it: a column (lower case), keyword (upper) or function."""
    lower, upper = tok.text.lower(), tok.text.upper()
    calls = following is not None and following.text == "("
    if upper in KEYWORDS:
        return upper
    if lower in (FUNCTIONS if calls else FILTER_COLUMNS):  # a word before '(' is a call
        return lower
    if upper in {"SELECT", "EXISTS"} or (not calls and upper in {"FROM", "WITH", "UNION"}):
        raise bad_where(where, "sub-selects are not allowed")
    if calls:
        raise bad_where(
            where, f"function {tok.text}() is not allowed (allowed: {', '.join(sorted(FUNCTIONS))})"
        )
    raise bad_where(
        where,
        f"{tok.text!r} is not a chunk column or an allowed keyword "
        f"(columns: {', '.join(sorted(FILTER_COLUMNS))}; keywords: {', '.join(sorted(KEYWORDS))})",
    )


def compile_where(where: str) -> str:
    """The caller's filter, checked and rebuilt token by token (UsageError naming the problem)."""
    _check_text(where)
    toks = list(tokens(where))
    if not toks:
        raise bad_where(where, "empty filter")
    _check_nesting(where, toks)
    out = []
    for i, tok in enumerate(toks):
        if tok.kind == "word":
            out.append(_render_word(where, tok, toks[i + 1] if i + 1 < len(toks) else None))
        elif tok.kind == "string":
            out.append(sql_str(tok.text[1:-1].replace("''", "'")))
        else:
            out.append(tok.text)
    return " ".join(out)


@dataclass(frozen=True)
class ChunkFilter:
    """Which chunks a search may return. Every part narrows; none can widen another."""

    path: str | None = None  # glob on the file path: '*.pdf', 'contracts/**'
    paths: Sequence[str] | None = None  # only these exact paths (kept as a tuple); None: any
    where: str | None = None  # the caller's SQL over chunk columns, checked at construction
    _where_sql: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.path is not None:
            if not isinstance(self.path, str):
                raise UsageError("the path filter must be a glob string, e.g. '*.pdf'")
            _check_text(self.path, "path glob")
        if self.paths is not None:
            if isinstance(self.paths, str) or not all(isinstance(p, str) for p in self.paths):
                raise UsageError("paths must be a list of path strings")
            object.__setattr__(self, "paths", tuple(self.paths))
            for one in self.paths:
                _check_text(one, "path")
        if self.where is not None:
            if not isinstance(self.where, str):
                raise UsageError("the where filter must be a string of SQL, e.g. 'page_start >= 2'")
            if self.where.strip():
                object.__setattr__(self, "_where_sql", compile_where(self.where))

    def sql(self) -> str | None:
        """The filter as one Lance SQL expression; None when it lets every chunk through."""
        clauses = []
        if self.path:
            clauses.append(f"path LIKE {sql_str(glob_to_like(self.path))}")
        if self.paths is not None:
            clauses.append(sql_in("path", self.paths) if self.paths else "FALSE")
        if self._where_sql:
            clauses.append(f"({self._where_sql})")
        return " AND ".join(clauses) or None

    @property
    def has_where(self) -> bool:
        return self._where_sql is not None


# Lance error text carries the source locations of the machine it was built on
# ("..., /home/runner/work/lance/.../planner.rs:584:26") and layers of wrappers.
_SOURCE_LOCATION = re.compile(r",?\s*(?:[A-Za-z]:)?[\\/][^\s,()]*\.rs:\d+(?::\d+)?")
_WRAPPER = re.compile(
    r"LanceError\(\w+\):\s*|Invalid user input:\s*|(?:Query )?Execution error:\s*|"
    r"Error during planning:\s*"
)
_PARSER = re.compile(r"sql parser error: (.*?)\)?$")


def lance_problem(exc: BaseException, sql: str | None = None, limit: int = 240) -> str:
    """A Lance error as one short line: no source paths, wrappers or echo of the filter `sql`."""
    text = " ".join(str(exc).split())
    text = _WRAPPER.sub("", _SOURCE_LOCATION.sub("", text)).strip(" ,")
    if sql:
        text = text.replace(f"Error resolving filter expression {sql}: ", "")
    parser = _PARSER.search(text)
    if parser:  # "Error parsing statement: SELECT 1 FROM t WHERE ... (sql parser error: X)"
        text = parser.group(1)
    return text if len(text) <= limit else text[: limit - 3] + "..."
