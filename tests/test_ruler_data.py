"""Reading RULER's QA data sets: a missing file names where to get it, a file of the wrong shape is refused at the
line and column of the first thing wrong, and a good one gives the compiler RULER's documents and questions. The
files here are made up in the data sets' formats; no SQuAD or HotpotQA text."""

import json

import pytest

from nspec.compiler.tasks.ruler.datasets import DatasetError, read_corpus

SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Gizmos",
            "paragraphs": [
                {
                    "context": "Gizmos are blue.",
                    "qas": [
                        {
                            "question": "Colour?",
                            "id": "1",
                            "answers": [{"text": "blue", "answer_start": 11}],
                            "is_impossible": False,
                        },
                        {"question": "Size?", "id": "2", "answers": [], "is_impossible": True},
                    ],
                }
            ],
        }
    ],
}
HOTPOT = [{"_id": "a", "question": "Who?", "answer": "Ann", "context": [["Ann", ["Ann was here. ", "Then left."]]]}]


def write(tmp_path, name, value):
    path = tmp_path / name
    path.write_text(value if isinstance(value, str) else json.dumps(value, indent=1))
    return str(path)


def test_good_files_give_ruler_s_documents_and_questions(tmp_path):
    squad = read_corpus("squad", write(tmp_path, "squad.json", SQUAD))
    assert squad.documents == ("Gizmos are blue.",) and [q.query for q in squad.questions] == ["Colour?"]
    hotpot = read_corpus("hotpotqa", write(tmp_path, "hotpotqa.json", HOTPOT))
    assert hotpot.documents == ("Ann\nAnn was here. Then left.",) and hotpot.questions[0].answers == ("Ann",)


@pytest.mark.parametrize(
    ("dataset", "url"),
    [("squad", "dev-v2.0.json"), ("hotpotqa", "hotpot_dev_distractor_v1.json")],
)
def test_a_missing_file_is_bad_input_naming_where_to_get_it(tmp_path, dataset, url):
    path = str(tmp_path / f"{dataset}.json")
    with pytest.raises(DatasetError) as caught:
        read_corpus(dataset, path)
    assert caught.value.exit_code == 2 and path in str(caught.value) and url in str(caught.value)


def test_a_squad_1_1_file_is_refused_at_its_first_question(tmp_path):
    old = json.loads(json.dumps(SQUAD))
    del old["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
    path = write(tmp_path, "squad.json", old)
    with pytest.raises(
        DatasetError,
        match=r"squad\.json:10:7: data\[0\]\.paragraphs\[0\]\.qas\[0\]: has no "
        r"'is_impossible' \(SQuAD 2\.0 marks every question; 1\.1 does not\)",
    ):
        read_corpus("squad", path)


def test_wrong_shapes_and_broken_json_are_located(tmp_path):
    bad = [dict(HOTPOT[0], context=[["Ann", "Ann was here."]])]
    with pytest.raises(
        DatasetError,
        match=r"hotpotqa\.json:9:5: \[0\]\.context\[0\]\[1\]: a paragraph's sentences "
        r"must be a list, not a string",
    ):
        read_corpus("hotpotqa", write(tmp_path, "hotpotqa.json", bad))
    with pytest.raises(DatasetError, match=r"hotpotqa\.json:1:1: the top level: a HotpotQA file"):
        read_corpus("hotpotqa", write(tmp_path, "hotpotqa.json", SQUAD))
    with pytest.raises(DatasetError, match=r"squad\.json:2:8: not JSON"):
        read_corpus("squad", write(tmp_path, "squad.json", '{"data":\n [1, 2,,]}'))
    binary = tmp_path / "squad.json"
    binary.write_bytes(b'{"data":\n ["\xc3\xa9", "\xff"]}')
    with pytest.raises(DatasetError, match=r"squad\.json:2:9: not UTF-8"):
        read_corpus("squad", str(binary))
    answerless = json.loads(json.dumps(SQUAD))
    answerless["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    with pytest.raises(DatasetError, match=r"qas\[0\]\.answers: an answerable question needs at least one answer"):
        read_corpus("squad", write(tmp_path, "squad.json", answerless))
