"""GraphWalks: graphs generated to each length with the expected node set recomputed here from the prompt text
alone; OpenAI's published rows run as data; F1 as OpenAI's card grades it; run end to end against the emulator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nspec.compiler.tasks import Slot
from nspec.compiler.tasks.graphwalks import EdgeStream, operation_text
from nspec.runners import pipeline
from nspec.runners.emulator.config import Degrade, Responder
from nspec.runners.emulator.responders import make_responder
from nspec.runners.grading.grader import grade
from nspec.runners.report.data import collect
from nspec.runners.report.page import score_tables, summary_words
from nspec.runners.run_store import Run

SPEC = """\
nspec: 1
name: walks
seed: 5
task: {name: graphwalks, params: {depth: 2}}
grid: {context_lengths: [1500, 3000], params: {operation: [bfs, parents]}}
prompt: {reserve_tokens: 64}
models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]
"""


def compiled(cli, spec_file, tmp_path, text=SPEC):
    name = spec_file(text)
    result = cli("compile", name, "-o", str(tmp_path / "out"))
    assert result.code == 0, result.err
    run = Path(result.out.strip().splitlines()[-1])
    cells = [json.loads(line) for line in (run / "cells.jsonl").read_text().splitlines()]
    requests = {}
    for shard in (run / "answers" / "requests").iterdir():
        for line in shard.read_text().splitlines():
            request = json.loads(line)
            requests[request["custom_id"]] = request
    return run, cells, requests


def user_text(request):
    body = request.get("body") or request["params"]
    return body["messages"][-1]["content"]


def reference_answer(prompt: str) -> list[str]:
    """The operation's answer, from the prompt text alone: the graph after "Here is the graph to operate on:", the
    operation after its last "Operation:"."""
    graph = prompt.split("Here is the graph to operate on:", 1)[1].rsplit("Operation:", 1)[0]
    edges = [tuple(line.split(" -> ")) for line in graph.splitlines() if " -> " in line]
    operation = prompt.rsplit("Operation:\n", 1)[1].split("\n", 1)[0]
    parents = re.fullmatch(r"Find the parents of node (\w+)\.", operation)
    if parents:
        return sorted({a for a, b in edges if b == parents.group(1)})
    bfs = re.fullmatch(r"Perform a BFS from node (\w+) with depth (\d+), .* exactly at depth \2\.", operation)
    start, depth = bfs.groups()
    frontier, seen = {start}, {start}
    for _ in range(int(depth)):
        frontier = {b for a, b in edges if a in frontier} - seen
        seen |= frontier
    return sorted(frontier)


def test_generated_graphs_fit_each_length_and_expect_what_the_prompt_implies(cli, spec_file, tmp_path):
    run, cells, requests = compiled(cli, spec_file, tmp_path)
    assert len(cells) == 8  # two models, two lengths, two operations
    sizes = {}
    for cell in cells:
        prompt = user_text(requests[cell["cell_id"]])
        assert prompt.startswith("You will be given a graph as a list of directed edges.")
        edges = [line for line in prompt.splitlines() if " -> " in line][4:]  # after the example's four
        assert len(edges) == cell["size"] == len(set(edges))  # no repeated edge
        assert all(a != b for a, b in (e.split(" -> ") for e in edges))  # no self-loop
        nodes = reference_answer(prompt)
        assert nodes and cell["data"]["nodes"] == nodes
        assert cell["expected"] == [f"Final Answer: [{', '.join(nodes)}]"]
        length = cell["context_length"]
        assert length["prompt"] + 64 == length["actual"] <= length["target"] < length["actual"] + 40
        sizes.setdefault(cell["axes"]["operation"], {})[length["target"]] = cell["size"]
    assert sizes["bfs"][3000] > 1.8 * sizes["bfs"][1500]  # more edges at longer lengths
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["task"]["axes"] == ["operation"]


def test_set_f1_is_openai_s_f1_over_the_last_final_answer_list():
    data = {"nodes": ["a", "b", "c", "d"]}
    scoring = [{"set_f1": True}]
    full = grade("Thinking...\nFinal Answer: [d, c, b, a]", expected=["x"], scoring=scoring, data=data)
    assert (full.verdict, full.score) == ("pass", 1.0)
    half = grade("Final Answer: [a, b]", expected=["x"], scoring=scoring, data=data)
    assert half.verdict == "fail" and half.score == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    last = grade("Final Answer: [a]\nNo wait.\nFinal Answer: [a, b, c, e]", expected=["x"], scoring=scoring, data=data)
    assert last.score == pytest.approx(0.75)  # the last list: precision 3/4, recall 3/4
    assert grade("a, b, c, d", expected=["x"], scoring=scoring, data=data).score == 0.0
    # As OpenAI's grader: an empty expected set scores 0, whatever the reply.
    assert grade("Final Answer: []", expected=["Final Answer: []"], scoring=scoring, data={"nodes": []}).score == 0
    # Outside a run (no cell data), the expected answer's own list is the expected set.
    assert grade("Final Answer: [a, b]", expected=["Final Answer: [a, b, c]"], scoring=scoring).score == 0.8
    lenient = grade("Final Answer: [a, b, c]", expected=["x"], scoring=[{"set_f1": {"threshold": 0.8}}], data=data)
    assert lenient.verdict == "pass"


def rows_file(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


PUBLISHED = [
    {
        "prompt": "The graph has the following edges:\nab -> cd\ncd -> ef\n\nOperation:\n"
        "Find the parents of node cd.\n",
        "answer_nodes": ["ab"],
        "prompt_chars": 80,
        "problem_type": "parents",
    },
    {
        "prompt": "Here is the graph to operate on:\n"
        + "ab -> cd\n" * 600
        + "\nOperation:\nPerform a BFS from node ab with depth 1.\n",
        "answer_nodes": ["cd"],
        "prompt_chars": 5000,
        "problem_type": "bfs",
    },
]
DATA_SPEC = SPEC.replace("params: {depth: 2}", "params: {data: walks.jsonl}").replace(
    ", params: {operation: [bfs, parents]}", ""
)


def test_published_rows_run_as_they_are_at_the_smallest_length_they_fit(cli, spec_file, tmp_path):
    rows_file(tmp_path / "walks.jsonl", PUBLISHED)
    run, cells, requests = compiled(cli, spec_file, tmp_path, DATA_SPEC)
    by_row = {(c["model"], c["item"]): c for c in cells}
    assert len(cells) == 4
    for model in ("openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"):
        short, long = by_row[(model, "row-0")], by_row[(model, "row-1")]
        assert short["context_length"]["target"] == 1500 and long["context_length"]["target"] == 3000
        assert user_text(requests[short["cell_id"]]) == PUBLISHED[0]["prompt"]
        assert short["data"]["nodes"] == ["ab"] and short["axes"] == {"operation": "parents"}
        assert short["question"] == "Find the parents of node cd."
    manifest = json.loads((run / "manifest.json").read_text())
    (read,) = manifest["task"]["files"]
    assert read["name"] == "walks.jsonl" and read["bytes"] == (tmp_path / "walks.jsonl").stat().st_size


def test_a_published_row_beyond_a_model_s_context_is_unplaced_not_dropped(cli, spec_file, tmp_path):
    rows_file(tmp_path / "walks.jsonl", PUBLISHED)
    short = DATA_SPEC.replace("{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, max_context: 2000}")
    run, cells, _ = compiled(cli, spec_file, tmp_path, short + "run: {on_too_long: drop}\n")
    assert sorted((c["model"], c["item"]) for c in cells) == [
        ("anthropic/claude-haiku-4-5", "row-0"),
        ("anthropic/claude-haiku-4-5", "row-1"),
        ("openai/gpt-4.1-mini", "row-0"),
    ]
    manifest = json.loads((run / "manifest.json").read_text())
    assert [m["dropped_cells"] for m in manifest["models"]] == [0, 0]  # a row goes where it fits, or nowhere:
    (unplaced,) = [f for f in manifest["fallbacks"] if f["kind"] == "unplaced"]  # counted once, as unplaced
    assert unplaced["cells"] == 1 and unplaced["message"].startswith("openai/gpt-4.1-mini: 1 of the task's prompts")


@pytest.mark.parametrize(
    "content, params, message",
    [
        (None, "{data: walks.parquet}", "task.params.data: walks.parquet: nspec reads JSONL or JSON, not parquet"),
        (
            '{"prompt": "p", "answer_nodes": ["a"], "problem_type": "bfs"}\n{oops\n',
            "{data: walks.jsonl}",
            "task.params.data: walks.jsonl:2:2: not JSON (",
        ),
        (
            '{"prompt": "p", "answer_nodes": "a", "problem_type": "bfs"}\n',
            "{data: walks.jsonl}",
            "task.params.data: walks.jsonl:1: `answer_nodes` must be a list of node ids",
        ),
        (
            '{"prompt": "p", "answer_nodes": [], "problem_type": "dfs"}\n',
            "{data: walks.jsonl}",
            'task.params.data: walks.jsonl:1: `problem_type` must be bfs or parents (got "dfs")',
        ),
        ("", "{data: walks.jsonl}", "task.params.data: walks.jsonl: holds no rows"),
        (None, "{data: nothere.jsonl}", "task.params.data: nothere.jsonl: cannot be read"),
        (None, "{data: ../outside.jsonl}", "task.params.data: ../outside.jsonl"),
        (
            '{"prompt": "p", "answer_nodes": [], "problem_type": "bfs"}\n',
            "{data: walks.jsonl, depth: 3}",
            "task.params.depth: `depth` is for generated graphs",
        ),
        (None, "{depth: 2, rows: 3}", "task.params.rows: `rows` counts the rows of a `data` file"),
        (None, "{depht: 2}", "task.params.depht: unknown key 'depht'"),
    ],
)
def test_a_bad_data_file_or_parameter_is_located_in_validate_plan_and_compile(
    cli, spec_file, tmp_path, content, params, message
):
    if content is not None:
        (tmp_path / "walks.jsonl").write_text(content, encoding="utf-8")
    (tmp_path / "walks.parquet").write_bytes(b"PAR1")
    (tmp_path / ".git").mkdir()  # the spec's root: nothing above it is read
    name = spec_file(DATA_SPEC.replace("{data: walks.jsonl}", params))
    for command in (["validate"], ["plan"], ["compile", "-o", "out"]):
        result = cli(*command, name)
        assert result.code == 2 and "Traceback" not in result.err, (command, result.err)
        assert "spec.yaml:4:" in result.err and message in result.err, (command, result.err)


def test_graphwalks_runs_is_scored_by_f1_and_reported(cli, spec_file, tmp_path, emulator, api_keys):
    """Sent to the emulator (answering from the run's own cells, a seeded share missed), scored by F1, and
    tabled as the report tables it: mean F1 and pass rate per operation and length."""
    emu = emulator()
    spec = SPEC.replace(
        "models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]",
        f'models: [{{id: openai/gpt-4.1-mini, base_url: "{emu.openai_base_url}", mode: live}}]',
    ).replace("[1500, 3000]", "[1500], trials: 4")
    run, _, _ = compiled(cli, spec_file, tmp_path, spec)
    emu.emulation.responder = make_responder(
        Responder(kind="cells", run=str(run), degrade=Degrade(miss_rate=0.4)), 0, None
    )
    pipeline.submit(run, live_backoff=0)
    assert not pipeline.collect(run, wait=True, live_backoff=0).pending
    pipeline.score(run)
    scores = [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 8 and {s["scorers"][0]["scorer"] for s in scores} == {"set_f1"}
    passed = sum(s["verdict"] == "pass" for s in scores)
    assert 0 < passed < 8
    data = collect([Run(run)])
    (table,) = score_tables(data, 0.5)
    assert table["axis"] == "operation" and data.metric.label == "F1"
    assert [row["value"] for row in table["rows"]] == ["bfs", "parents"]
    shares = [float(row["pass_rate"].rstrip("%")) / 100 * 4 for row in table["rows"]]
    assert round(sum(shares)) == passed
    (words,) = summary_words(data, 0.5)  # a task without depths: the pass rate per length alone
    assert words["text"].startswith(f"{passed / 8:.1%} of 8 cells pass (95% CI "), words
    assert "depth" not in words["text"] and "effective length" in words["text"], words


def test_each_operation_reads_the_graph_of_its_first_edges_as_a_whole_graph_scan_would():
    stream = EdgeStream(Slot(None, 5000, 0, 7))
    stream.grow(3000)
    for n in (1, 2, 7, 100, 999, 3000):
        graph = "Here is the graph to operate on:\n" + "\n".join(stream.lines[:n])
        nodes = stream.nodes(n)
        assert nodes == sorted({node for line in stream.lines[:n] for node in line.split(" -> ")})
        for node in nodes[:: max(1, len(nodes) // 40)]:
            for operation, depth in (("parents", 2), ("bfs", 1), ("bfs", 2), ("bfs", 3)):
                question = operation_text(operation, node, depth)
                expected = reference_answer(f"{graph}\n\nOperation:\n{question}\n")
                assert stream.answer(n, operation, node, depth) == expected


def test_a_length_of_a_million_tokens_is_fitted_in_a_few_builds_of_one_graph_per_sample(cli, spec_file, monkeypatch):
    """The size search guesses from the counts so far, not doubling up from one edge (some forty builds of a graph
    of a hundred thousand edges), and the models of a sample build from the same edges, drawn once."""
    streams, builds = [], []
    init, grow = EdgeStream.__init__, EdgeStream.grow

    def counted_init(self, slot):
        streams.append(slot)
        init(self, slot)

    def counted_grow(self, n):
        builds.append(n)
        grow(self, n)

    monkeypatch.setattr(EdgeStream, "__init__", counted_init)
    monkeypatch.setattr(EdgeStream, "grow", counted_grow)
    result = cli("validate", spec_file(SPEC.replace("context_lengths: [1500, 3000]", "context_lengths: [1000000]")))
    assert result.code == 0, result.err
    assert len(streams) == 2  # one graph per operation, which both models are fitted from
    assert len(builds) <= 5 * 4, builds  # four cells: two models, two operations
