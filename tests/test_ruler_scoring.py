"""RULER's metrics, prediction clean-up and results table, against values RULER's own functions give
(scripts/eval/synthetic/constants.py and evaluate.py's postprocess_pred, run on the same inputs) and the rows of its
README's table."""

import pytest

from nspec.runners.grading import ruler
from nspec.runners.report import headline, notation

THRESHOLD = 85.6  # RULER's: Llama-2-7B (chat) at 4K

RAW = [
    "  The special magic numbers are 1234567 and\x07 7654321.\n",
    "\tVAR ABCDE, VAR FGHIJ\x00 klmno\r\n",
    "",
    "Paris is the answer",
    "nothing here\x1f",
    "ALPHA beta",
]
REFS = [
    ["1234567", "7654321"],
    ["ABCDE", "FGHIJ", "KLMNO", "PQRST"],
    ["x"],
    ["paris", "France"],
    ["here", "there"],
    ["alpha", "gamma", "beta"],
]


def test_metrics_and_clean_up_give_what_ruler_s_functions_give():
    # RULER's postprocess_pred, string_match_all and string_match_part on RAW and REFS
    cleaned = [ruler.postprocess(p) for p in RAW]
    assert cleaned == [
        "The special magic numbers are 1234567 and\n 7654321.",
        "VAR ABCDE, VAR FGHIJ\n klmno",
        "",
        "Paris is the answer",
        "nothing here",
        "ALPHA beta",
    ]
    assert ruler.string_match_all(cleaned, REFS) == 56.94
    assert ruler.string_match_part(cleaned, REFS) == 83.33
    assert ruler.string_match_all(cleaned[:3], REFS[:3]) == 58.33
    assert ruler.string_match_part(cleaned[3:], REFS[3:]) == 100.0
    assert ruler.task_score("vt", RAW, REFS) == 56.94 and ruler.task_score("qa_2", RAW, REFS) == 83.33


def test_the_thirteen_tasks_and_their_metrics():
    assert len(ruler.TASKS) == 13
    assert [t for t, m in ruler.TASKS.items() if m is ruler.string_match_part] == ["qa_1", "qa_2"]


K = [4096, 8192, 16384, 32768, 65536, 131072]
# rows of RULER's README table: scores at 4K..128K, effective length, Avg., wAvg. (inc), wAvg. (dec)
README = {
    "GPT-4-1106-preview": ([96.6, 96.3, 95.2, 93.2, 87.0, 81.2], "64K", 91.6, 89.0, 94.1),
    "Llama3.1 (70B)": ([96.5, 95.8, 95.4, 94.8, 88.4, 66.6], "64K", 89.6, 85.5, 93.7),
    "Gemini-1.5-pro": ([96.7, 95.8, 96.0, 95.9, 95.9, 94.4], ">128K", 95.8, 95.5, 96.1),
    "Mixtral-8x7B": ([94.9, 92.1, 92.5, 85.9, 72.4, 44.5], "32K", 80.4, 72.8, 87.9),
    "InternLM2.5 (7B)": ([88.1, 85.5, 84.5, 82.7, 75.5, 68.9], "4K", 80.9, 77.8, 83.9),
    "LWM (7B)": ([82.3, 78.4, 73.7, 69.1, 68.1, 65.0], "<4K", 72.8, 69.9, 75.7),
    "DBRX": ([95.1, 93.8, 83.6, 63.1, 2.4, 0.0], "8K", 56.3, 38.0, 74.7),
}


@pytest.mark.parametrize("model", README)
def test_effective_length_and_averages_reproduce_ruler_s_table(model):
    scores, effective, average, increasing, decreasing = README[model]
    by_length = dict(zip(K, scores, strict=True))
    assert notation.effective(headline.longest_at(by_length, THRESHOLD), K) == effective
    assert round(sum(scores) / 6, 1) == average
    assert round(headline.weighted_average(by_length, True), 1) == increasing
    assert round(headline.weighted_average(by_length, False), 1) == decreasing


def test_effective_length_is_the_longest_passing_length_a_tie_passing():
    assert headline.longest_at({4096: 90.0, 8192: 80.0, 16384: 85.6, 32768: 85.59}, THRESHOLD) == 16384
    assert headline.longest_at({4096: 85.0}, THRESHOLD) is None


def test_table_averages_the_tasks_of_each_length_and_underlines_what_passes():
    models = {"m": {4096: {"vt": 100.0, "cwe": 80.0}, 8192: {"vt": 90.0, "cwe": 70.0}}}
    assert headline.markdown(models, THRESHOLD).split("\n") == [
        "|Model|Effective Length|4K|8K|Avg.|wAvg. (inc)|wAvg. (dec)|",
        "|:---:|:---:|:---:|:---:|:---:|:---:|:---:|",
        "|m|4K|<ins>90.0</ins>|80.0|85.0|83.3|86.7|",
    ]
