"""Grading one answer: the spec's scorers on tricky answers, negative controls, the default cascade on the patterns
that free-text answers take, and the public `nspec.grade` API."""

import pytest

import nspec
from nspec.errors import UserError
from nspec.runners.grading.calibration import decides
from nspec.runners.grading.cascade import cascade
from nspec.runners.grading.grader import grade
from nspec.runners.grading.scoring import score_cell
from nspec.runners.grading.text import normalize
from nspec.scorers import GradeInput

NOT_FOUND = ["UNANSWERABLE", "not found"]


def verdict(answer, expected, scorer, options=True, **kw):
    return grade(answer, expected=expected, scoring=[{scorer: options}], **kw).verdict


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("The special magic number is 1234567.", "pass"),
        ("It is 1,234,567.", "pass"),  # thousands separators are normalised
        ("1234568", "fail"),
        ("I could not find it.", "fail"),
    ],
)
def test_contains(answer, expected):
    assert verdict(answer, ["1234567"], "contains", "{answer}") == expected


def test_contains_normalisation_options():
    assert verdict("DOLORES PARK", ["dolores park"], "contains", {"value": "{answer}"}) == "pass"
    strict = {"value": "{answer}", "normalize": {"case": False}}
    assert verdict("DOLORES PARK", ["dolores park"], "contains", strict) == "fail"
    loose = {"value": "{answer}", "normalize": {"punctuation": True}}
    assert verdict("eat a sandwich, and sit", ["eat a sandwich and sit"], "contains", loose) == "pass"


def test_accepted_answers_are_alternatives_unless_all_are_required():
    assert verdict("It is Paris.", ["London", "Paris"], "contains", "{answer}") == "pass"
    both = grade("111 only", expected=["111", "222"], scoring=[{"contains": "{answer}"}], require="all")
    assert (both.verdict, both.reason) == ("fail", "contains 1 of 2 expected")


def test_exact_is_undecided_rather_than_fail():
    assert verdict("  Paris ", ["paris"], "exact", "{answer}") == "pass"
    assert verdict("The answer is Paris.", ["paris"], "exact", "{answer}") == "undecided"


def test_regex_escapes_the_answer():
    assert verdict("code 3.14 ok", ["3.14"], "regex", r"\b{answer}\b") == "pass"
    assert verdict("code 3x14 ok", ["3.14"], "regex", r"\b{answer}\b") == "fail"
    assert verdict("paris", ["x"], "regex", {"pattern": "PARIS", "ignore_case": False}) == "fail"


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("The Fern Swift landed 10 crates on day 6.", "pass"),  # a number inside text, among others
        ("ten crates", "undecided"),  # no digits: a judge must decide
        ("It landed 12 crates.", "fail"),
        ("It landed 10.0 crates.", "pass"),
    ],
)
def test_number(answer, expected):
    assert verdict(answer, ["10"], "number") == expected


def test_number_with_tolerance_and_non_numeric_expectations():
    assert verdict("about 10.4", ["10"], "number", {"tolerance": 0.5}) == "pass"
    assert verdict("No", ["No"], "number") == "undecided"


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("4518823", "pass"),
        ("UNANSWERABLE", "fail"),
        ("4518823 or UNANSWERABLE", "undecided"),  # both rails: unparsable
        ("I refuse to answer.", "undecided"),  # neither
    ],
)
def test_rails(answer, expected):
    assert verdict(answer, ["4518823"], "rails", {"not_found": NOT_FOUND}) == expected


def test_all_of_counts_the_share():
    v = grade(
        "111 and 333",
        expected=["111", "222", "333", "444"],
        scoring=[{"all_of": {"value": "{answer}", "threshold": 0.5}}],
        require="all",
    )
    assert (v.verdict, v.score) == ("pass", 0.5)
    assert verdict("111", ["111", "222"], "all_of", "{answer}", require="all") == "fail"


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("UNANSWERABLE", "pass"),
        ("The number is not found in the text.", "pass"),
        ("The document does not mention a magic number for Oslo.", "pass"),  # said the way models say it
        ("The special magic number is 5550123.", "fail"),  # invents a value
        ("Emma married Mr Knightley.", "fail"),  # answers something else
        ("Not found, but maybe 5550123.", "undecided"),
    ],
)
def test_negative_controls(answer, expected):
    assert verdict(answer, [], "rails", {"not_found": NOT_FOUND}) == expected


def test_a_negative_control_may_repeat_a_number_from_its_question():
    v = grade("There is no magic number for flight 4471.", expected=[], question="What is the number of flight 4471?")
    assert v.verdict == "pass"


def test_cascade_first_decisive_scorer_wins():
    cell = {"cell_id": "c", "model": "m", "prompt": None, "negative": False, "expected": ["10"], "alternates": []}
    cell["question"] = "How many crates?"
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
    "answer, expected",
    [
        ("No.", "pass"),
        ("No, the document never says so.", "pass"),
        ("Nothing in the text says that.", "fail"),  # "No" is not a word of it
        ("I do not know.", "fail"),
    ],
)
def test_no_as_the_right_answer_with_contains(answer, expected):
    assert verdict(answer, ["No"], "contains", "{answer}") == expected


def test_numbers_match_whole():
    assert verdict("The code is 1423.", ["42"], "contains", "{answer}") == "fail"
    assert verdict("The code is 42.", ["42"], "contains", "{answer}") == "pass"


def test_refusals_are_not_answers():
    refusal = "I'm sorry, but I can't help with that."
    assert verdict(refusal, ["4518823"], "contains", "{answer}") == "fail"
    assert verdict(refusal, ["4518823"], "rails", {"not_found": NOT_FOUND}) == "undecided"
    assert verdict(refusal, [], "rails", {"not_found": NOT_FOUND}) == "fail"
    v = grade(refusal, expected=["4518823"])  # the cascade's refusal rule is measured on too few answers to decide
    assert (v.verdict, v.rule) == ("undecided", "refusal") and v.reason.startswith("refuses to answer")


# -- the default cascade, on the patterns free-text answers take ----------------------------------------------------

BARD = """A bard from the hills of Peru
Lost a friend that he dearly once knew;
In a week of black gloom
He composed, in his room,
An epicedium, mournful and true."""
BARD_Q = "What did the bard from Peru do after losing his friend?"
THISTLE = """Mr. Thistle, what's this all about?
Every rule of the club you would flout."""


def auto(answer, expected=("He composed an epicedium.",), question=BARD_Q, needle=BARD):
    return grade(answer, expected=list(expected), question=question, needle=needle)


def test_a_paraphrase_passes():
    v = auto("By composing a morose epicedium.")
    assert (v.verdict, v.scorer, v.reason) == ("pass", "auto", "gives the expected answer")


def test_a_right_answer_ending_in_a_refusal_phrase_passes():
    assert auto("He composed an epicedium, though the exact day is not mentioned.").verdict == "pass"


def test_a_refusal_that_quotes_the_needle_fails():
    v = auto("The text does not provide enough context. It simply states: 'He composed, in his room, An epicedium.'")
    assert (v.verdict, v.rule) == ("fail", "not-found")
    assert v.reason.startswith("says the context does not hold the answer (quoting the needle)")


def test_a_quote_that_is_not_in_the_needle_is_undecided():
    v = auto('He composed an epicedium; the limerick says: "In sorrow he sang by the sea, for his friend\'s memory."')
    assert (v.verdict, v.reason) == ("undecided", "quotes text that is not in the needle")
    assert auto('"He composed, in his room, / An epicedium, mournful and true."').verdict == "pass"  # a real quote
    assert auto('He composed an epicedium: "He composed... an epicedium"').verdict == "pass"  # with an ellipsis


def test_yes_no_polarity_not_substrings():
    q = "Does Mr. Thistle follow the club's rules?"
    assert auto("No, he flouts every rule.", ["No"], q, THISTLE).verdict == "pass"
    # the opposite stance is found, and decides once its rule is measured precise enough (calibration.json)
    opposite = cascade("Yes, he follows them.", GradeInput(("No",), (), q, THISTLE))
    assert (opposite.verdict, opposite.rule) == ("fail", "polar")
    assert auto("Yes, he follows them.", ["No"], q, THISTLE).verdict == ("fail" if decides(opposite) else "undecided")
    # "no" inside an answer about something else is not a "No"
    assert auto("Mr. Thistle is remembered for achieving no fame.", ["No"], q, THISTLE).verdict == "undecided"


def test_the_one_answering_says_not_found_with_verbs_of_finding():
    assert auto("I do not see a limerick about a bard from Peru.").rule == "not-found"
    assert auto("I don't give a damn.").verdict == "undecided"  # a limerick's line, not a "not found"


def test_other_words_are_no_evidence_but_not_found_is():
    # an answer in words the needle does not have may be a paraphrase: the judges decide
    v = auto("He sailed to Lima to forget his sorrow.")
    assert (v.verdict, v.rule) == ("undecided", "no-key-words")
    v = auto("There is no limerick about a bard from Peru.")
    assert (v.verdict, v.rule) == ("fail", "not-found")
    found = cascade(
        "There is no limerick about a bard from Peru.", GradeInput(("He composed an epicedium.",), (), BARD_Q, BARD)
    )
    assert (found.verdict, found.reason) == ("fail", "says the context does not hold the answer")


def test_hedges_and_negations_stay_undecided():
    assert auto("Perhaps he composed an epicedium, or maybe a sonnet.").verdict == "undecided"
    assert auto("He did not compose an epicedium.").verdict == "undecided"


def test_numbers_and_number_words():
    needle = "Day 13: the Fern Swift came in from Naples and landed 49 crates of slate."
    q = "How many crates of slate did the Fern Swift land?"
    assert auto("Forty-nine crates.", ["49"], q, needle).verdict == "pass"
    assert auto("The Fern Swift landed 49 crates on day 13.", ["49"], q, needle).verdict == "pass"
    v = auto("It landed 47 crates.", ["49"], q, needle)
    assert (v.verdict, v.reason) == ("fail", "gives 47, not 49")


def test_multi_value_answers_get_partial_credit():
    values = ["4410987", "2290475", "7718302", "5093316"]
    v = grade("4410987 and 2290475", expected=values, require="all")
    assert (v.verdict, v.rule) == ("undecided", "multi-value") and "gives 2 of 4" in v.reason  # never measured
    assert grade(", ".join(values), expected=values, require="all").verdict == "pass"


def test_without_a_needle_quotes_are_not_checked():
    assert auto('He composed an epicedium: "a lament by the sea for my friend".', needle=None).verdict == "pass"


def test_empty_answers_fail():
    found = cascade("  ", GradeInput(("He composed an epicedium.",), (), BARD_Q, BARD))
    assert (found.verdict, found.reason) == ("fail", "the answer is empty")
    assert auto("  ").reason.startswith("the answer is empty")
    assert auto("  ").verdict == ("fail" if decides(found) else "undecided")


def test_grade_is_the_package_api():
    assert nspec.grade is grade
    assert nspec.Verdict is type(grade("x", expected=["x"]))
    assert grade("Paris", expected=["Paris"]).as_dict() == {
        "scorer": "auto",
        "rule": "equals",
        "verdict": "pass",
        "reason": "equals an accepted answer",
        "score": 1.0,
    }


@pytest.mark.parametrize(
    "scoring, message",
    [
        ([{"regex": "("}], "scoring[0].regex: not a valid regular expression"),
        ([{"fuzzy": True}], "unknown scorer 'fuzzy'"),
        ([{"contains": "{answer}", "exact": "{answer}"}], "exactly one key"),
    ],
)
def test_grade_refuses_a_scoring_it_cannot_use(scoring, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        grade("x", expected=["x"], scoring=scoring)
    with pytest.raises(UserError, match="list of accepted answers"):
        grade("x", expected="x")


def test_irregular_verbs_meet_their_question():
    needle = "A tabby who lived in a mill / Ate a mouse every day, with some skill."
    q = "What did the tabby eat every day?"
    assert auto("She ate a mouse every day.", ["She ate a mouse."], q, needle).verdict == "pass"
    assert auto("The tabby never ate.", ["A mouse."], q, needle).verdict == "undecided"  # a denial is for judges
