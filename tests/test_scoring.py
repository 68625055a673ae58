"""Deterministic scorers on tricky answers, negative controls, and the cascade."""

import pytest

from nspec.runners.scoring import normalize, score_cell, score_negative, score_one

NOT_FOUND = ("UNANSWERABLE", "not found")


@pytest.mark.parametrize(
    "answer, verdict",
    [
        ("The special magic number is 1234567.", "pass"),
        ("It is 1,234,567.", "pass"),  # thousands separators are normalised
        ("1234568", "fail"),
        ("I could not find it.", "fail"),
    ],
)
def test_contains(answer, verdict):
    assert score_one("contains", "{answer}", answer, ["1234567"]).verdict == verdict


def test_contains_normalisation_options():
    assert score_one("contains", {"value": "{answer}"}, "DOLORES PARK", ["dolores park"]).verdict == "pass"
    strict = {"value": "{answer}", "normalize": {"case": False}}
    assert score_one("contains", strict, "DOLORES PARK", ["dolores park"]).verdict == "fail"
    loose = {"value": "{answer}", "normalize": {"punctuation": True}}
    assert score_one("contains", loose, "eat a sandwich, and sit", ["eat a sandwich and sit"]).verdict == "pass"


def test_exact_is_undecided_rather_than_fail():
    assert score_one("exact", "{answer}", "  Paris ", ["paris"]).verdict == "pass"
    assert score_one("exact", "{answer}", "The answer is Paris.", ["paris"]).verdict == "undecided"


def test_regex_escapes_the_answer():
    assert score_one("regex", r"\b{answer}\b", "code 3.14 ok", ["3.14"]).verdict == "pass"
    assert score_one("regex", r"\b{answer}\b", "code 3x14 ok", ["3.14"]).verdict == "fail"
    assert score_one("regex", {"pattern": "PARIS", "ignore_case": False}, "paris", ["x"]).verdict == "fail"


@pytest.mark.parametrize(
    "answer, verdict",
    [
        ("The Fern Swift landed 10 crates on day 6.", "pass"),  # a number inside text, among others
        ("ten crates", "undecided"),  # no digits: a judge must decide
        ("It landed 12 crates.", "fail"),
        ("It landed 10.0 crates.", "pass"),
    ],
)
def test_number(answer, verdict):
    assert score_one("number", True, answer, ["10"]).verdict == verdict


def test_number_with_tolerance_and_non_numeric_expectations():
    assert score_one("number", {"tolerance": 0.5}, "about 10.4", ["10"]).verdict == "pass"
    assert score_one("number", True, "No", ["No"]).verdict == "undecided"


@pytest.mark.parametrize(
    "answer, verdict",
    [
        ("4518823", "pass"),
        ("UNANSWERABLE", "fail"),
        ("4518823 or UNANSWERABLE", "undecided"),  # both rails: unparsable
        ("I refuse to answer.", "undecided"),  # neither
    ],
)
def test_rails(answer, verdict):
    assert score_one("rails", {"not_found": list(NOT_FOUND)}, answer, ["4518823"]).verdict == verdict


def test_all_of_counts_the_share():
    v = score_one("all_of", {"value": "{answer}", "threshold": 0.5}, "111 and 333", ["111", "222", "333", "444"])
    assert (v.verdict, v.score) == ("pass", 0.5)
    assert score_one("all_of", "{answer}", "111", ["111", "222"]).verdict == "fail"


@pytest.mark.parametrize(
    "answer, verdict",
    [
        ("UNANSWERABLE", "pass"),
        ("The number is not found in the text.", "pass"),
        ("The special magic number is 5550123.", "fail"),  # invents a value
        ("Emma married Mr Knightley.", "fail"),  # answers something else
        ("Not found, but maybe 5550123.", "undecided"),
    ],
)
def test_negative_controls(answer, verdict):
    assert score_negative(answer, NOT_FOUND).verdict == verdict


def test_cascade_first_decisive_scorer_wins():
    cell = {"cell_id": "c", "model": "m", "prompt": None, "negative": False, "expected": ["10"], "alternates": []}
    scoring = [{"exact": "{answer}"}, {"number": True}, {"judge": {"models": ["openai/x"]}}]
    line = score_cell(scoring, cell, {"status": "ok", "text": "It was 10 crates."})
    assert [s["verdict"] for s in line["scorers"]] == ["undecided", "pass"]  # judges are a later stage
    assert (line["verdict"], line["score"]) == ("pass", 1.0)
    undecided = score_cell(scoring, cell, {"status": "ok", "text": "ten crates"})
    assert undecided["verdict"] == "undecided" and undecided["score"] is None


def test_failed_requests_are_errors_not_failures():
    cell = {"cell_id": "c", "model": "m", "prompt": None, "negative": False, "expected": ["1"], "alternates": []}
    line = score_cell([{"contains": "{answer}"}], cell, {"status": "error", "error": {"code": "batch_expired"}})
    assert line["verdict"] == "error" and line["score"] is None and "batch_expired" in line["reason"]


def test_normalize():
    assert normalize("  The  Answer:\n 1,234,567 ", {"punctuation": True}) == "the answer 1234567"


@pytest.mark.parametrize(
    "answer, verdict",
    [
        ("No.", "pass"),
        ("No, the document never says so.", "pass"),
        ("Nothing in the text says that.", "fail"),  # "No" is not a word of it
        ("I do not know.", "fail"),
    ],
)
def test_no_as_the_right_answer(answer, verdict):
    assert score_one("contains", "{answer}", answer, ["No"]).verdict == verdict


def test_numbers_match_whole():
    assert score_one("contains", "{answer}", "The code is 1423.", ["42"]).verdict == "fail"
    assert score_one("contains", "{answer}", "The code is 42.", ["42"]).verdict == "pass"


def test_refusals_are_not_answers():
    refusal = "I'm sorry, but I can't help with that."
    assert score_one("contains", "{answer}", refusal, ["4518823"]).verdict == "fail"
    assert score_one("rails", {"not_found": list(NOT_FOUND)}, refusal, ["4518823"]).verdict == "undecided"
    assert score_negative(refusal, NOT_FOUND).verdict == "fail"
