"""The `graphwalks` family: OpenAI's GraphWalks. A random directed graph, listed one edge per line as `a -> b`, and
an operation on it — the nodes exactly at a depth of a breadth-first search from a node, or the parents of a node —
answered as `Final Answer: [...]` and scored by F1 between the node sets (`set_f1`).

The graph is generated to the cell's length (`Sized`: more edges at longer lengths) and the expected set computed
from the graph that was built; or, with `data:`, the rows of OpenAI's published file are sent as they are (`Fixed`),
each at the smallest grid length it fits.

The prompt is OpenAI's, word for word as its published rows have it (huggingface.co/datasets/openai/graphwalks),
with one change the rows' wording needed: a breadth-first search asks for the nodes "exactly at depth N" (OpenAI's
"Perform a BFS from node X with depth N" left open whether nodes nearer than N count; its grader counts only those
at N). Unlike OpenAI's graphs, these have no self-loops and no repeated edges.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from nspec.prompt import Turn

from ..json_input import Record
from . import Axis, Built, Detail, Draft, Family, Fixed, Setup, Sized, Slot, Task, datafile

# OpenAI's framing, from its published rows: the instructions, one worked example, the graph and the operation.
INSTRUCTIONS = (
    "You will be given a graph as a list of directed edges. All nodes are at least degree 1. You will also get a "
    "description of an operation to perform on the graph.\n"
    "Your job is to execute the operation on the graph and return the set of nodes that the operation results in. "
    "If asked for a breadth-first search (BFS), only return the nodes that are reachable at that depth, do not "
    "return the starting node. If asked for the parents of a node, only return the nodes that have an edge leading "
    "to the given node, do not return the given node itself.\n\n"
    "Here is an example:\n<begin example>\n\n"
    "The graph has the following edges:\nuvwx -> alke\nabcd -> uvwx\nabcd -> efgh\nefgh -> uvwx\n\n"
    "Example 1:\nOperation:\nPerform a BFS from node abcd with depth 1.\nFinal Answer: [uvwx, efgh]\n\n"
    "Example 2:\nOperation:\nPerform a BFS from node alke with depth 1.\nFinal Answer: []\n\n"
    "Example 3:\nOperation:\nFind the parents of node uvwx.\nFinal Answer: [abcd, efgh]\n\n"
    "Example 4:\nOperation:\nFind the parents of node abcd.\nFinal Answer: []\n\n"
    "<end example>\n"
    "Here is the graph to operate on:\nThe graph has the following edges:\n"
)
CLOSING = (
    "\n\nYou should immediately return the set of nodes that the operation results in, with no additional text. "
    "Return your final answer as a list of nodes in the very last line of your response.\n"
)
OPERATIONS = ("bfs", "parents")
# Edges per node as the graph grows: edge i joins nodes among the first 2 + i // EDGES_PER_NODE.
EDGES_PER_NODE = 2
STEP = 1  # edges: the sizes tried when fitting a length
PICKS = 32  # random nodes tried for the operation before the others in order
TRIED = 256  # the most nodes tried in all: a graph none of whose first nodes has an answer is too small to ask
NEVER = 1 << 62  # the first edge of a node no edge has reached yet


def operation_text(operation: str, node: str, depth: int) -> str:
    if operation == "parents":
        return f"Find the parents of node {node}."
    return f"Perform a BFS from node {node} with depth {depth}, and return the nodes exactly at depth {depth}."


def final_answer(nodes: Sequence[str]) -> str:
    """The reply OpenAI's examples show: `Final Answer: [a, b]`."""
    return f"Final Answer: [{', '.join(nodes)}]"


class EdgeStream:
    """The edges of one sample's graph, drawn once and in order: the graph of n edges is the first n, so a longer
    context holds the graph of a shorter one and more. No self-loops, no repeated edge. Each node's edges out and in
    are listed in the order drawn, so an operation on the first n edges reads the node's neighbourhood, not the whole
    graph (a graph at a length of millions has a million edges, and each size tried asks about several nodes)."""

    def __init__(self, slot: Slot) -> None:
        self.sample = (slot.seed, slot.length, slot.trial)
        self.draws = slot.draws("graphwalks-edges", slot.length, slot.trial)
        self.lines: list[str] = []  # each edge as the prompt lists it
        self._tails, self._heads = array("i"), array("i")  # each edge's nodes, by number (an edge: tail -> head)
        self._names: list[str] = []  # each node's id, by number
        self._number: dict[str, int] = {}  # each node's number, by name
        self._first: list[int] = []  # each node's first edge (NEVER: none yet)
        self._out: list[array[int]] = []  # each node's edges out, by number (the order drawn)
        self._in: list[array[int]] = []  # and in

    def _name_nodes(self, count: int) -> None:
        """Name the first ``count`` nodes, each 10 hex digits as OpenAI's graphs name theirs (a node's name depends
        only on its number and the names before it)."""
        seed, length, trial = self.sample
        for n in range(len(self._names), count):
            salt = 0
            while True:
                key = f"graphwalks-node\0{seed}\0{length}\0{trial}\0{n}\0{salt}"
                name = hashlib.sha256(key.encode()).hexdigest()[:10]
                if name not in self._number:
                    break
                salt += 1
            self._number[name] = n
            self._names.append(name)
            self._first.append(NEVER)
            self._out.append(array("i"))
            self._in.append(array("i"))

    def grow(self, n: int) -> None:
        """Draw edges until there are ``n``."""
        lines, tails, heads, out, names, first, below = (
            self.lines,
            self._tails,
            self._heads,
            self._out,
            self._names,
            self._first,
            self.draws.below,
        )
        while len(lines) < n:
            edge = len(lines)
            pool = 2 + edge // EDGES_PER_NODE
            if pool > len(names):
                self._name_nodes(pool)
            while True:
                a = below(pool)
                b = below(pool - 1)
                b += b >= a  # never a self-loop
                if all(heads[e] != b for e in out[a]):  # a node has a few edges out: no repeated edge
                    break
            lines.append(f"{names[a]} -> {names[b]}")
            tails.append(a)
            heads.append(b)
            out[a].append(edge)
            self._in[b].append(edge)
            if first[a] == NEVER:
                first[a] = edge
            if first[b] == NEVER:
                first[b] = edge

    def nodes(self, n: int) -> list[str]:
        """The ids of the nodes of the first ``n`` edges (drawn), sorted."""
        return sorted(name for name, first in zip(self._names, self._first, strict=True) if first < n)

    def answer(self, n: int, operation: str, node: str, depth: int) -> list[str]:
        """The operation's nodes in the graph of the first ``n`` edges, sorted: the parents of ``node``, or the
        nodes whose shortest path from it has exactly ``depth`` edges (never ``node`` itself)."""
        start = self._number[node]
        if operation == "parents":
            return sorted({self._names[self._tails[e]] for e in _before(self._in[start], n)})
        seen, frontier = {start}, [start]
        for _ in range(depth):
            reached = []
            for at in frontier:
                for e in _before(self._out[at], n):
                    child = self._heads[e]
                    if child not in seen:
                        seen.add(child)
                        reached.append(child)
            frontier = reached
        return sorted(self._names[i] for i in frontier)


def _before(edges: array[int], n: int) -> array[int]:
    """Of a node's edges, in the order drawn, those among the first ``n``."""
    return edges[: bisect.bisect_left(edges, n)]


class GraphWalksFamily(Family):
    name = "graphwalks"
    params_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "operation": {
                "description": "`bfs`: the nodes exactly at `depth` of a breadth-first search from a node; "
                "`parents`: the nodes with an edge to a node.",
                "enum": list(OPERATIONS),
                "default": "bfs",
            },
            "depth": {
                "description": "The depth of a breadth-first search.",
                "type": "integer",
                "minimum": 1,
                "maximum": 16,
                "default": 2,
            },
            "data": datafile.data_param(
                "OpenAI's published GraphWalks file (or one of its shape: `prompt`, `answer_nodes`, `problem_type`)",
                "its prompts are sent as they are, instead of generated graphs",
            ),
            "rows": datafile.ROWS_PARAM,
        },
    }
    path_params = ("data",)
    axes = (Axis("operation", "Operation"),)
    details = (
        Detail("edges", "data.edges"),
        Detail("from node", "data.node"),
        Detail("BFS depth", "data.depth"),
        Detail("published row", "data.row"),
    )
    default_scoring = ({"set_f1": True},)

    def task(self, setup: Setup) -> GeneratedGraphs | PublishedRows:
        params = setup.params
        rows = datafile.published(setup, ("operation", "depth"), "graphs", checked_row)
        if rows is not None:
            return PublishedRows(rows)
        return GeneratedGraphs(params.get("operation", "bfs"), params.get("depth", 2))


class GeneratedGraphs(Task):
    def __init__(self, operation: str, depth: int) -> None:
        self.operation, self.depth = operation, depth
        self._stream: EdgeStream | None = None

    def cells(self, lengths: Sequence[int]) -> int:
        return len(lengths)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        # A sample's models build the same graphs: the last sample's edges serve the next model on it.
        if self._stream is None or self._stream.sample != (slot.seed, slot.length, slot.trial):
            self._stream = EdgeStream(slot)
        stream = self._stream

        def build(size: int) -> Built:
            stream.grow(size)
            node, nodes, redrawn = self._pick(slot, size, stream)
            operation = operation_text(self.operation, node, self.depth)
            graph = "\n".join(stream.lines[:size])
            text = f"{INSTRUCTIONS}{graph}\n\nOperation:\n{operation}{CLOSING}"
            data = {"nodes": nodes, "node": node, "edges": size}
            unscorable = None if nodes else self._empty(size)
            return Built(
                text, "", [final_answer(nodes)], data, question=operation, unscorable=unscorable, redrawn=redrawn
            )

        question = operation_text(self.operation, "N", self.depth)  # the build names the node
        data = {"depth": self.depth} if self.operation == "bfs" else {}
        yield Draft({"operation": self.operation}, Sized(build, step=STEP), question, data=data)

    def _pick(self, slot: Slot, size: int, stream: EdgeStream) -> tuple[str, list[str], int]:
        """The node the operation starts from, drawn among the nodes of the graph of ``size`` edges until its answer
        is not empty (an empty set scores 0 whatever the reply, under OpenAI's F1), with that answer and how many
        nodes drawn before it were set aside (none found among `TRIED`: the first node, with no answer)."""
        draws = slot.draws("graphwalks-node", slot.length, slot.trial, size)
        nodes = stream.nodes(size)
        tries = [nodes[draws.below(len(nodes))] for _ in range(PICKS)]
        for tried, node in enumerate([*tries, *nodes][:TRIED]):  # the rest in order, should random draws all miss
            answer = stream.answer(size, self.operation, node, self.depth)
            if answer:
                return node, answer, tried
        return nodes[0], [], 0

    def _empty(self, size: int) -> str:
        """Why a graph of ``size`` edges with no node to ask about cannot be scored."""
        if self.operation == "parents":
            return f"no node of its graph ({size:,} edges) tried has a parent"
        return (
            f"no node of its graph ({size:,} edges) tried has nodes exactly at depth {self.depth}, so the expected set "
            "would be empty, which F1 scores 0 whatever the reply; use a smaller `depth` or longer context lengths"
        )


class PublishedRows(Task):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def cells(self, lengths: Sequence[int]) -> int:
        return len(self.rows)

    def drafts(self, slot: Slot) -> Iterator[Draft]:
        for row in self.rows:
            operation = row["problem_type"]
            question = row["prompt"].rsplit("Operation:", 1)[-1].strip().split("\n", 1)[0]
            yield Draft(
                {"item": f"row-{row['row']}", "operation": operation},
                Fixed((Turn("user", row["prompt"]),)),
                question,
                [final_answer(row["answer_nodes"])],
                data={"nodes": row["answer_nodes"], "row": row["row"]},
            )


def checked_row(record: Record, index: int) -> dict[str, Any]:
    """A row of OpenAI's file, with what is read of it. A row expecting no node is refused: F1 (OpenAI's grade) scores
    its cell 0 whatever the reply."""
    row = record.value
    if not isinstance(row, dict):
        raise record.refusal("a row is an object with prompt, answer_nodes and problem_type")
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise record.refusal("`prompt` must be the text of the user message")
    nodes = row.get("answer_nodes", row.get("answer"))
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise record.refusal("`answer_nodes` must be a list of node ids")
    kind = row.get("problem_type")
    if kind not in OPERATIONS:
        raise record.refusal(f"`problem_type` must be bfs or parents (got {json.dumps(kind)[:40]})")
    if not nodes:
        raise record.refusal(
            "`answer_nodes` is empty: F1 scores such a cell 0 whatever the reply (OpenAI's grade does too), so no "
            "model can pass it; leave such rows out of the file (with pandas: rows[rows.answer_nodes.str.len() > 0])"
        )
    return {"row": index, "prompt": prompt, "answer_nodes": nodes, "problem_type": kind}


FAMILY = GraphWalksFamily()
