"""RULER's eight niah tasks (src/nspec/compiler/tasks/ruler/niah.py) against RULER's own text and rules: its template,
answer prefix and task table as recorded from NVIDIA/RULER, expected answers recomputed from each built prompt, needle,
key, value and query counts, placement, distractors, sizes that only grow, and the essay split as NLTK splits it."""

from __future__ import annotations

import ast
import gzip
import hashlib
import itertools
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler import niah
from nspec.compiler.tasks.ruler.haystacks import DEPTHS, NOISE, Essay, insert_at_depths, sent_tokenize
from nspec.compiler.tasks.ruler.niah import ANSWER_PREFIX, TASKS, TEMPLATE, Niah, NiahTask, incremental
from nspec.compiler.tasks.ruler.words import wonderwords
from nspec.compiler.tokenizers import encoding

PUNKT = json.loads((Path(__file__).parent / "data" / "punkt_english.json").read_text("utf-8"))

# NVIDIA/RULER scripts/data/synthetic/constants.py at c3f5e3b4f87f, the niah entry as it stands there.
RULER_CONSTANTS_NIAH = r'''{
        'tokens_to_generate': 128,
        'template': """Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided text?""",
        'answer_prefix': """ The special magic {type_needle_v} for {query} mentioned in the provided text are"""
    }'''  # noqa: E501

# NVIDIA/RULER scripts/synthetic.yaml at c3f5e3b4f87f, its niah tasks as they stand there.
RULER_SYNTHETIC_YAML = """
niah_single_1:
  task: niah
  args:
    type_haystack: noise
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 1

niah_single_2:
  task: niah
  args:
    type_haystack: essay
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 1

niah_single_3:
  task: niah
  args:
    type_haystack: essay
    type_needle_k: words
    type_needle_v: uuids
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 1

niah_multikey_1:
  task: niah
  args:
    type_haystack: essay
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 4
    num_needle_v: 1
    num_needle_q: 1

niah_multikey_2:
  task: niah
  args:
    type_haystack: needle
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 1

niah_multikey_3:
  task: niah
  args:
    type_haystack: needle
    type_needle_k: uuids
    type_needle_v: uuids
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 1

niah_multivalue:
  task: niah
  args:
    type_haystack: essay
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 1
    num_needle_v: 4
    num_needle_q: 1

niah_multiquery:
  task: niah
  args:
    type_haystack: essay
    type_needle_k: words
    type_needle_v: numbers
    num_needle_k: 1
    num_needle_v: 1
    num_needle_q: 4
"""

NEEDLE = re.compile(r"One of the special magic (numbers|uuids|words) for (.+?) is: ([\w-]+)\.")
QUESTION = re.compile(r"What (is|are all) the special magic (\w+) for (.+) mentioned in the provided text\?")
VALUE = {"numbers": r"[1-9]\d{6}", "uuids": r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"}


def _austen(chars: int) -> str:
    data = resources.files("nspec.compiler.corpora").joinpath("austen", "persuasion.txt.gz").read_bytes()
    return gzip.decompress(data).decode("utf-8")[:chars]


# An essay haystack for the tests: nspec's own sample of Punkt's hard cases, then the start of Persuasion.
ESSAY = Essay(PUNKT["samples"][0]["text"] + _austen(20_000))


def _sample(name: str, sample: int = 0) -> Niah:
    task = TASKS[name]
    return Niah(task, "test", sample, ESSAY if task.type_haystack == "essay" else None)


def _parsed(text: str) -> tuple[str, str, list[str], list[tuple[str, str, str]]]:
    """A built prompt read back as RULER lays it out: head line, context, the keys asked, the needles."""
    head, rest = text.split("\n", 1)
    context, question = rest.rsplit("\n", 1)
    asked = QUESTION.fullmatch(question)
    assert asked, question
    named = asked.group(3)
    queries = named.split(", and ")[0].split(", ") + named.split(", and ")[1:] if ", and " in named else [named]
    return head, context, queries, NEEDLE.findall(context)


def _sizes(task: NiahTask) -> list[int]:
    return [4, 5, 25, 60] if task.type_haystack != "essay" else [0, 1, 40, 500, 1200, 5000]


def test_template_and_answer_prefix_are_ruler_s_word_for_word():
    ruler = ast.literal_eval(RULER_CONSTANTS_NIAH)
    assert ruler["template"] == TEMPLATE
    assert ruler["answer_prefix"] == ANSWER_PREFIX
    assert ruler["tokens_to_generate"] == niah.TOKENS_TO_GENERATE


def test_the_task_table_is_ruler_s_synthetic_yaml():
    ruler = YAML(typ="safe").load(RULER_SYNTHETIC_YAML)
    assert {name: NiahTask(**entry["args"]) for name, entry in ruler.items()} == TASKS
    assert all(entry["task"] == "niah" for entry in ruler.values())


def test_depths_are_ruler_s_linspace():
    # np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int); no value falls on a half
    linspace = tuple(round(100 * i / 39) for i in range(40))
    assert linspace == DEPTHS


def test_incremental_is_ruler_s():
    assert [incremental(h, 4096) for h in ("noise", "essay", "needle")] == [25, 500, 25]
    assert [incremental(h, 4095) for h in ("noise", "essay", "needle")] == [5, 500, 5]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_expected_answers_are_what_the_prompt_says(name):
    """Parse each prompt as a reader would and recompute the answers: the values of the keys asked, key by key."""
    task = TASKS[name]
    for size in _sizes(task):
        built = _sample(name).build(size)
        head, _, queries, needles = _parsed(built.text)
        values: dict[str, list[str]] = {}
        for kind, key, value in needles:
            assert kind == task.type_needle_v and re.fullmatch(VALUE.get(kind, r"[\w-]+"), value)
            values.setdefault(key, []).append(value)
        asked = [key for key, _ in Counter(k for _, k, _ in needles).items() if key in queries]
        assert sorted(asked) == sorted(queries)
        per_query = [
            sorted(built.expected[i : i + task.num_needle_v]) for i in range(0, len(built.expected), task.num_needle_v)
        ]
        assert [sorted(values[q]) for q in queries] == per_query
        one = task.num_needle_q * task.num_needle_v == 1
        singular = task.type_needle_v[:-1]
        assert head == (
            f"A special magic {singular} is hidden within the following text. Make sure to memorize it. I will quiz "
            f"you about the {singular} afterwards."
            if one
            else f"Some special magic {task.type_needle_v} are hidden within the following text. Make sure to "
            f"memorize it. I will quiz you about the {task.type_needle_v} afterwards."
        )
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        assert built.answer_prefix == (
            f" The special magic {singular if one else task.type_needle_v} for {query} mentioned in the provided "
            f"text {'is' if one else 'are'}"
        )


@pytest.mark.parametrize("name", sorted(TASKS))
def test_counts_of_needles_keys_values_and_queries_are_synthetic_yaml_s(name):
    task = TASKS[name]
    size = _sizes(task)[-1]
    built = _sample(name).build(size)
    _, context, queries, needles = _parsed(built.text)
    keys = max(task.num_needle_k, task.num_needle_q)  # RULER's num_needle_k = max(num_needle_k, num_needle_q)
    assert len(built.data["needles"]) == keys * task.num_needle_v
    assert len({NEEDLE.fullmatch(n).group(2) for n in built.data["needles"]}) == keys
    assert all(context.count(needle) == 1 for needle in built.data["needles"])
    assert len(needles) == keys * task.num_needle_v + (size if task.type_haystack == "needle" else 0)
    assert len(queries) == len(set(queries)) == task.num_needle_q
    assert len(built.expected) == task.num_needle_q * task.num_needle_v


@pytest.mark.parametrize("name", ["niah_single_1", "niah_multikey_2", "niah_multikey_3"])
def test_line_haystacks_hold_size_lines_and_a_needle_before_some_of_them(name):
    task = TASKS[name]
    for size in _sizes(task):
        built = _sample(name).build(size)
        _, context, _, _ = _parsed(built.text)
        lines = context.split("\n")
        assert len(lines) == size + len(built.data["needles"])
        assert lines[-1] not in built.data["needles"]  # RULER inserts before a line, never after the last
        haystack = [line for line in lines if line not in built.data["needles"]]
        if task.type_haystack == "noise":
            assert haystack == [NOISE] * size
        else:
            assert all(NEEDLE.fullmatch(line) for line in haystack)


@pytest.mark.parametrize("task", [TASKS["niah_multikey_2"], NiahTask("needle", "uuids", "numbers", num_needle_k=2)])
def test_a_distractor_never_holds_a_needle_s_key(task, monkeypatch):
    """Keys drawn from four only: distractors would hold the needles' keys often; such a key is drawn again."""
    real = niah.draw

    def few(draws: Draws, kind: str) -> str:
        return ("key-a", "key-b", "key-c", "key-d")[draws.below(4)] if kind == task.type_needle_k else real(draws, kind)

    monkeypatch.setattr(niah, "draw", few)
    built = Niah(task, "test", 3).build(60)
    _, _, queries, needles = _parsed(built.text)
    needle_keys = {NEEDLE.fullmatch(needle).group(2) for needle in built.data["needles"]}
    assert len(needle_keys) == task.keys
    assert sorted(value for _, key, value in needles if key in queries) == sorted(built.expected)
    assert sum(key in needle_keys for _, key, _ in needles) == len(built.data["needles"])  # no distractor has one
    assert {key for _, key, _ in needles} == {"key-a", "key-b", "key-c", "key-d"}


def test_a_line_haystack_shorter_than_its_needles_is_refused():
    with pytest.raises(ValueError, match="no place"):
        Niah(NiahTask("noise", "words", "numbers", num_needle_k=4), "test", 0).build(3)


@pytest.mark.parametrize("name", sorted(n for n, t in TASKS.items() if t.type_haystack == "essay"))
def test_essay_needles_sit_between_sentences_at_ruler_s_depths(name):
    for size in _sizes(TASKS[name]):
        built = _sample(name).build(size)
        _, context, _, _ = _parsed(built.text)
        sentences = ESSAY.sentences(size)
        bare = context
        for needle in built.data["needles"]:
            bare = bare.replace(needle, "\0")
        runs = [" ".join(run.split()) for run in bare.split("\0")]
        assert " ".join(run for run in runs if run) == " ".join(sentences)  # the essay, whole and in order
        ends = [len(" ".join(sentences[:k])) for k in range(len(sentences) + 1)]
        places = {int(len(sentences) * (depth / 100)) for depth in DEPTHS}
        for i in range(1, len(runs)):  # each needle follows whole sentences, as many as a depth of RULER's gives
            before = len(" ".join(run for run in runs[:i] if run))
            assert before in ends and ends.index(before) in places


def test_insert_at_depths_is_ruler_s_loop():
    sentences = ["A.", "B.", "C.", "D.", "E."]
    # positions [0] + sorted(int(5 * d / 100)) + [5]: depths 0, 41, 100 -> 0, 2, 5; an empty run leaves two spaces
    assert insert_at_depths(sentences, ["x", "y", "z"], [41, 100, 0]) == " x A. B. y C. D. E. z "
    assert insert_at_depths([], ["x"], [51]) == " x "


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_larger_size_is_a_longer_prompt(name):
    task = TASKS[name]
    tokens = encoding("o200k_base")
    sample = _sample(name, 1)
    step = incremental(task.type_haystack, 4096)
    built = [sample.build(size) for size in range(step, 9 * step, step)]
    lengths = [(len(b.text), len(tokens.encode(b.text + b.answer_prefix))) for b in built]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(lengths))
    assert all((b.expected, b.data["queries"]) == (built[0].expected, built[0].data["queries"]) for b in built)


def test_samples_are_drawn_from_the_seed_and_number_alone():
    a, b = _sample("niah_multivalue", 2).build(800), _sample("niah_multivalue", 2).build(800)
    assert a == b
    assert _sample("niah_multivalue", 3).build(800).expected != a.expected


def test_built_prompts_never_change():
    """Compiled files must be byte-identical for years: a change here changes every compiled RULER niah sample."""
    digests = {
        name: hashlib.sha256((b.text + "\0" + b.answer_prefix).encode()).hexdigest()[:16]
        for name in sorted(TASKS)
        for b in [_sample(name, 5).build(50 if TASKS[name].type_haystack != "essay" else 2000)]
    }
    assert digests == {
        "niah_multikey_1": "0c8102755d37ead7",
        "niah_multikey_2": "1b6cb680a7cba974",
        "niah_multikey_3": "023522b1ab5c78a9",
        "niah_multiquery": "236345281568a42a",
        "niah_multivalue": "980b5b0944c55e38",
        "niah_single_1": "9f249ea1183b3359",
        "niah_single_2": "29c221557851634d",
        "niah_single_3": "aed1b7bd6541a635",
    }


def test_words_are_ruler_s_adjective_noun_pairs_each_once():
    """A pair drawn uniformly is a uniform draw from RULER's sorted set of words when no two pairs make one word."""
    adjectives, nouns = set(wonderwords("adjectivelist")), set(wonderwords("nounlist"))
    assert (len(adjectives), len(nouns)) == (910, 6786)
    clashes = [
        (head, tail)
        for adjective in adjectives
        for i in [m.start() for m in re.finditer("-", adjective)]
        if (head := adjective[:i]) in adjectives
        for tail in [adjective[i + 1 :]]
        if any(noun.startswith(tail + "-") for noun in nouns)
    ]
    assert clashes == []
    word = niah.draw(Draws("w"), "words")
    assert any(word.startswith(a + "-") and word[len(a) + 1 :] in nouns for a in adjectives)


@pytest.mark.parametrize("sample", range(len(PUNKT["samples"])), ids=["hard-cases", "white-space", "austen"])
def test_sentences_are_nltk_s(sample):
    """NLTK's sent_tokenize, recorded with NLTK's own English model (tests/data/punkt_english.json)."""
    recorded = PUNKT["samples"][sample]
    text = recorded["text"]
    if text.startswith("austen/"):
        text = " ".join(re.sub(r"\s+", " ", _austen(20_000)).split(" ")).strip()
    assert sent_tokenize(text) == recorded["sentences"]


def test_an_essay_prefix_splits_as_the_prefix_itself_would():
    """Every size, repeating the words past their end: leading and trailing white space, Punkt's hard cases."""
    text = "  " + PUNKT["samples"][0]["text"] + PUNKT["samples"][1]["text"] + _austen(600) + "\n"
    essay = Essay(text)
    sizes = [*range(len(essay.words) + 40), 2 * len(essay.words) + 2]
    assert [essay.sentences(size) for size in sizes] == [sent_tokenize(essay.text(size)) for size in sizes]
    assert Essay(text).sentences(7) == essay.sentences(7)  # whatever was split before


def test_an_essay_s_inserts_read_off_its_text_are_ruler_s_join():
    # Runs of sentences are read off the text where they stand one space apart; where the text has other white space
    # between two sentences (here, two spaces where the essay's copies meet), they are joined as RULER joins them.
    text = "First one here. Second one, Dr. Who said.  Third! Fourth? Fifth is last. "
    essay = Essay(text)
    for size in range(0, 3 * len(text.split()) + 3):
        for depths in ([0], [100], [41, 100, 0], [3, 3, 51], [26, 95, 97, 100]):
            inserts = [f"[{d}]" for d in depths]
            assert essay.inserted(size, inserts, depths) == insert_at_depths(essay.sentences(size), inserts, depths)
    assert "  " in essay._text  # the copies of the essay meet there
    assert ESSAY.inserted(9_000, ["x", "y"], [41, 5]) == insert_at_depths(ESSAY.sentences(9_000), ["x", "y"], [41, 5])
