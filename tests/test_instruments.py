"""Numbered instruments: what a query and a document's opening name, and the Retriever's lift.

The corpus is a contract family: an agreement and its amendments No. 1-3, each amendment
restating the agreement's title and parties and citing its clause 3, so "3" tells them apart no
better than any other word; BM25 ranks the shorter siblings above Amendment No. 3 for a query
about it. The lift puts Amendment No. 3 first and says why in `Hit.scores`, and leaves a query
that names no instrument as the fused ranking has it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import docsearch.ranking as ranking_module
from docsearch.instruments import OPENING_CHARS, Instrument, in_query, matches, own
from docsearch.retriever import Retriever
from tests.helpers import index_into


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Consider the Amendment No. 3 to the Supply Agreement", {("amendment", "3")}),
        ("AMENDMENT #2 to the lease", {("amendment", "2")}),
        ("the Second Amendment to the lease", {("amendment", "2")}),
        ("its 3rd amendment of the lease", {("amendment", "3")}),
        ("Amendment n° 01 to the Global Maintenance Agreement", {("amendment", "1")}),
        (
            "Exhibit 10.1(a) to the lease and Schedule B of it",
            {("exhibit", "10.1(A)"), ("schedule", "B")},
        ),
        (
            "Statement of Work No. 4 and SOW #5",
            {("statement of work", "4"), ("statement of work", "5")},
        ),
        # Bare forms name a statute's part as often as a document: no lift for them.
        ("Ninth Schedule; Seventeenth Amendment; Article 31B", set()),
        ("what amendments 11 and 12 changed in schedule B", set()),
        ("the Second Amendment", set()),
        ("a schedule a party signs, an amendment to the agreement", set()),
        ("termination for cause within 30 days", set()),
    ],
)
def test_a_query_names_its_instruments(query: str, expected: set[tuple[str, str]]) -> None:
    assert in_query(query) == {Instrument(kind, number) for kind, number in expected}


def test_an_opening_names_itself_by_its_first_heading_form() -> None:
    cites_earlier = (
        "AMENDMENT NO. 2\n\nDated 2006. The Agreement, as amended by Amendment No. 1, ..."
    )
    assert own(cites_earlier) == {"amendment": "2"}
    assert own("AMENDMENT 1 TO DEVELOPMENT AGREEMENT This First Amendment") == {"amendment": "1"}
    # A contents line numbers a clause by its page; a heading would say "No." or "to".
    contents = "TABLE OF CONTENTS 21. Notices 34 22. Amendment 35 23. Exhibit A Form of Order"
    assert own(contents) == {"exhibit": "A"}
    late = "x " * OPENING_CHARS + "THIRD AMENDMENT TO LEASE"
    assert own(late) == {}
    wanted = in_query("the Amendment No. 2 to the License Agreement")
    assert matches(wanted, cites_earlier) == wanted
    assert matches(wanted, "AMENDMENT NO. 1 ... as later amended by Amendment No. 2") == set()


TITLE = "Supply Agreement between Acme Widgets Corporation and Beta Components Limited"
BODY = [
    "Acme shall buy and Beta shall supply widgets at the prices in the price list of clause 3.",
    "Either party may end the Supply Agreement on ninety days written notice.",
    "Beta Components Limited warrants the widgets against defects for one year.",
]


def _write_family(root: Path) -> None:
    root.mkdir()
    original = [f"{TITLE}.", *BODY, f"Signed for the {TITLE} by Acme and Beta."]
    (root / "agreement.txt").write_text("\n\n".join(original) + "\n")
    dates = {1: "3 March 2019", 2: "3 June 2020", 3: "1 May 2021"}
    for n, change in (
        (1, "the price list"),
        (2, "the notice period"),
        (3, "the warranty period for parts"),
    ):
        text = (
            f"AMENDMENT NO. {n} TO THE {TITLE.upper()}\n\nDated {dates[n]}. "
            f"This amendment changes {change} of clause 3."
        )
        (root / f"amendment{n}.txt").write_text(text + "\n")
    (root / "unrelated.txt").write_text("Tomato seedlings want warm soil and regular water.\n")


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Retriever:
    tmp = tmp_path_factory.mktemp("instruments")
    _write_family(tmp / "docs")
    db = str(tmp / "db")
    report = index_into(db, tmp / "docs", "family", encoder="none")
    assert not report.failed
    return Retriever("family", db=db)


def _names(retriever: Retriever, query: str) -> list[str]:
    return [Path(hit.path).name for hit in retriever.search(query, k=5)]


def test_the_named_amendment_is_lifted_above_its_siblings(
    family: Retriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = f"Consider the Amendment No. 3 to the {TITLE}; what does it change?"
    monkeypatch.setattr(ranking_module, "LIFT_INSTRUMENTS", False)
    unlifted = _names(family, query)
    assert unlifted[0] != "amendment3.txt"  # the family's shared words rank another first
    monkeypatch.setattr(ranking_module, "LIFT_INSTRUMENTS", True)
    hits = family.search(query, k=5)
    assert [Path(h.path).name for h in hits][0] == "amendment3.txt"
    assert hits[0].scores["instrument"] == {"rank": 1, "score": 1.0}
    assert all("instrument" not in h.scores for h in hits[1:])
    # The others keep their fused order.
    assert [Path(h.path).name for h in hits][1:] == [n for n in unlifted if n != "amendment3.txt"]
    second = _names(family, f"the Second Amendment to the {TITLE}")
    assert second[0] == "amendment2.txt"


def test_a_query_naming_no_instrument_keeps_the_fused_order(
    family: Retriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = f"the amendment to the {TITLE} about the warranty"
    lifted = family.search(query, k=5)
    monkeypatch.setattr(ranking_module, "LIFT_INSTRUMENTS", False)
    plain = family.search(query, k=5)
    assert [(h.path, h.score) for h in lifted] == [(h.path, h.score) for h in plain]
    assert all("instrument" not in h.scores for h in lifted)


def test_an_instrument_no_document_is_leaves_the_order(
    family: Retriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = f"Consider the Amendment No. 7 to the {TITLE}"
    lifted = _names(family, query)
    monkeypatch.setattr(ranking_module, "LIFT_INSTRUMENTS", False)
    assert lifted == _names(family, query)
