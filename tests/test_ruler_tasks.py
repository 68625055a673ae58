"""RULER's vt, cwe, fwe and qa generators: each sample is RULER's template around a context built by RULER's rules,
and its expected answers are what that very text says — recomputed here by reading the prompt (following the
chains, counting the words) — and a larger size is a longer prompt."""

from __future__ import annotations

import itertools
import re
from collections import Counter

import pytest

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler import cwe, fwe, qa, vt
from nspec.compiler.tasks.ruler.cwe import CommonWords
from nspec.compiler.tasks.ruler.fwe import FrequentWords
from nspec.compiler.tasks.ruler.qa import QuestionAnswering, hotpotqa_corpus, squad_corpus
from nspec.compiler.tasks.ruler.sampling import DistinctIndices, distinct_indices, fixed_order, permutation
from nspec.compiler.tasks.ruler.vt import VariableTracking
from nspec.compiler.tasks.ruler.words import common_words_vocabulary
from nspec.compiler.tasks.sizing import largest_fitting
from nspec.compiler.tokenizers import encoding

COUNT = encoding("o200k_base").count


def strictly_growing(build, sizes):
    counts = [COUNT(b.text + b.answer_prefix) for b in map(build, sizes)]
    return all(a < b for a, b in itertools.pairwise(counts))


# --- variable tracking ---------------------------------------------------------------------------------------------


def assigned(text: str, value: str) -> list[str]:
    """Every variable the text's VAR lines give ``value``, in the order they get it."""
    lines = re.findall(r"^VAR ([A-Z]+) = (?:(\d+)|VAR ([A-Z]+)) ?$", text, re.M)
    holders: list[str] = []
    for name, number, source in lines:
        if number == value or source in holders:
            holders.append(name)
    return holders


def test_vt_answer_is_every_variable_the_question_s_value_reaches_in_the_text():
    sample = VariableTracking(7, 3, COUNT).build(40)
    example, _, task = sample.text.rpartition("\n\nMemorize and track")
    task = "Memorize and track" + task
    value = re.search(r"assigned the value (\d+) in the text above\.$", task)[1]
    assert assigned(task, value) == sample.expected and len(sample.expected) == 5
    assert sample.answer_prefix == vt.ANSWER_PREFIX.format(num_v=5, query=value)
    lines = task.split("\n")
    assert lines[:2] == ["Memorize and track the chain(s) of variable assignment hidden in the following text.", ""]
    assert lines.count(vt.NOISE) == 40 and len(lines) == 2 + 40 + 5 + 1
    # RULER's one-shot example before it: the same task, 3-letter names, its answer after the prefix and a space
    names = re.search(r"they are:  ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3})$", example).groups()
    icl_value = re.search(r"assigned the value (\d+) in the text above\.", example)[1]
    assert assigned(example, icl_value) == list(names)
    # RULER sizes the example without its answer: at most 500 tokens, and one more noise line would not fit
    icl = VariableTracking(7, 3, COUNT)._icl
    question = icl[: icl.rindex("they are: ") + len("they are: ")]
    assert vt.ICL_TOKENS - 30 < COUNT(question) <= vt.ICL_TOKENS


def test_vt_example_is_the_task_s_one_renamed_per_sample_and_a_sample_grows_by_noise_only():
    first, second = (VariableTracking(7, n, COUNT) for n in (0, 1))
    mask = lambda text: re.sub(r"\b[A-Z]{3}\b(?<!VAR)", "X", re.sub(r"\d{5}", "N", text))  # noqa: E731
    assert first._icl == second._icl and first._icl.count(vt.ICL_VALUE) == 3
    one, two = (v.build(20).text.partition("\n\nMemorize")[0] for v in (first, second))
    assert one != two and mask(one) == mask(two) == mask(first._icl.rstrip("\n"))
    assert first.build(20).expected == first.build(200).expected
    assert strictly_growing(first.build, range(5, 60, 5))
    with pytest.raises(ValueError):
        first.build(4)  # no room for a chain of 5 lines


def test_vt_several_chains_each_keep_their_order_and_only_the_first_is_asked():
    sample = VariableTracking(1, 0, COUNT, num_chains=2, num_hops=2).build(12)
    task = sample.text.rpartition("\n\nMemorize")[2]
    values = re.findall(r"^VAR [A-Z]+ = (\d+)$", task, re.M)
    assert len(values) == 2 and assigned(task, values[0]) == sample.expected and len(sample.expected) == 3
    assert sample.data["value"] == values[0]


# --- common words ----------------------------------------------------------------------------------------------


def numbered_words(listing: str) -> list[str]:
    entries = re.split(r"(?:^| )(\d+)\. ", listing)[1:]
    numbers, words = entries[0::2], entries[1::2]
    assert numbers == [str(i + 1) for i in range(len(numbers))]
    return words


def test_cwe_expected_are_the_words_the_list_repeats_most_and_the_example_shows_its_own():
    sample = CommonWords(5, 2, 8192).build(50)
    example, _, task = sample.text.rpartition("\nBelow is a numbered list of words.")
    counts = Counter(numbered_words(task.split("\n")[1]))
    assert len(counts) == 50 and sum(counts.values()) == 10 * 30 + 40 * 3
    assert {w for w, n in counts.items() if n == 30} == set(sample.expected) and len(sample.expected) == 10
    assert set(counts.values()) == {30, 3}
    assert example.startswith("Below is a numbered list of words.") and example.endswith(
        "\nQuestion: What are the 10 most common words in the above list?"
        + cwe.ANSWER_PREFIX
        + " "
        + " ".join(
            f"{i + 1}. {w}" for i, w in enumerate(re.findall(r"\d+\. (\S+(?: \S+)?)(?= \d+\.|$)", example)[-10:])
        )
    )
    shown = Counter(numbered_words(example.split("\n")[1]))
    assert len(shown) == 40 and sorted(set(shown.values())) == [3, 10]
    assert sample.answer_prefix == cwe.ANSWER_PREFIX


def test_cwe_below_4096_uses_ruler_s_short_counts_and_sizes_stop_at_the_vocabulary():
    sample = CommonWords(5, 0, 2048).build(30)
    example, _, task = sample.text.rpartition("\nBelow is a numbered list")
    assert Counter(Counter(numbered_words(task.split("\n")[1])).values()) == {6: 10, 1: 20}
    assert Counter(Counter(numbered_words(example.split("\n")[1])).values()) == {3: 10, 1: 10}
    big = CommonWords(5, 0, 131072)
    assert big.limit == len(common_words_vocabulary()) == 8169
    with pytest.raises(ValueError):
        big.build(big.limit + 1)
    assert big.build(20).expected == big.build(400).expected
    assert strictly_growing(big.build, range(10, 200, 10))


def test_cwe_every_sample_of_a_length_places_its_common_words_alike_as_ruler_s_fixed_seed_shuffle_does():
    places = []
    for n in (0, 1):
        sample = CommonWords(5, n, 8192).build(40)
        words = numbered_words(sample.text.rpartition("\n")[0].rpartition("\n")[2])
        places.append([i for i, w in enumerate(words) if w in sample.expected])
    assert places[0] == places[1]


# --- frequent words ----------------------------------------------------------------------------------------------


def test_fwe_expected_are_the_three_most_frequent_coded_words_after_the_dots():
    sample = FrequentWords(3, 1, 4096).build(2000)
    context = re.search(r"coded words\. (.*)\nQuestion: Do not provide", sample.text, re.S)[1]
    counts = Counter(context.split(" "))
    ranked = [w for w, _ in counts.most_common()]
    assert ranked[0] == fwe.NOISE_WORD and ranked[1:4] == sample.expected
    assert all(re.fullmatch("[a-z]{6}", w) for w in ranked[1:])
    assert [counts[w] for w in ranked] == [n for n in fwe.counts(2000, 80, 2.0) if n]
    assert sample.answer_prefix == fwe.ANSWER_PREFIX


def test_fwe_counts_and_zeta_are_ruler_s_numpy_and_scipy_values():
    # scipy.special.zeta and (num_words * k**-alpha / zeta(alpha)).astype(int), run in RULER's environment
    assert fwe.zeta(2.0) == 1.6449340668482264 and fwe.zeta(3.0) == 1.2020569031595942
    assert fwe.zeta(1.5) == pytest.approx(2.612375348685488, rel=1e-15)
    assert fwe.counts(5000, 80, 2.0)[:8] == [3039, 759, 337, 189, 121, 84, 62, 47]
    assert fwe.counts(7, 10, 2.0) == [4, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert fwe.step(131072) == 4094 and FrequentWords(0, 0, 131072).vocab_size == 2620


def test_fwe_grows_with_its_size_and_keeps_its_vocabulary():
    words = FrequentWords(3, 1, 8192)
    assert words.build(100).expected == words.build(5000).expected
    assert strictly_growing(words.build, range(400, 4000, 400))
    fits = lambda size: COUNT(words.build(size).text + fwe.ANSWER_PREFIX) + fwe.TOKENS_TO_GENERATE <= 8192  # noqa: E731
    size = largest_fitting(fits, fwe.step(8192))
    assert fits(size) and not fits(size + fwe.step(8192))


# --- question answering ----------------------------------------------------------------------------------------


def squad(articles):
    """A SQuAD 2.0-shaped file: articles of paragraphs ``(context, [(question, answers or None if impossible)])``."""
    return {
        "version": "v2.0",
        "data": [
            {
                "title": f"article {a}",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "question": q,
                                "id": q,
                                "answers": [{"text": t} for t in answers or []],
                                "is_impossible": answers is None,
                            }
                            for q, answers in questions
                        ],
                    }
                    for context, questions in paragraphs
                ],
            }
            for a, paragraphs in enumerate(articles)
        ],
    }


SQUAD = squad(
    [
        [
            ("Zeta paragraph about gizmos.", [("Which gizmo?", ["blue gizmo", "gizmo"]), ("Nothing?", None)]),
            ("Alpha paragraph about widgets.", [("How many widgets?", ["seven"])]),
        ],
        [(f"Filler paragraph {i}.", []) for i in range(30)] + [("Beta paragraph.", [("Beta?", ["b"])])],
    ]
)


def test_squad_corpus_is_ruler_s_sorted_paragraphs_and_answerable_questions():
    corpus = squad_corpus(SQUAD)
    assert list(corpus.documents) == sorted(corpus.documents) and len(corpus.documents) == 33
    assert [q.query for q in corpus.questions] == ["Which gizmo?", "How many widgets?", "Beta?"]
    first = corpus.questions[0]
    assert corpus.documents[first.gold[0]] == "Zeta paragraph about gizmos." and first.answers == (
        "blue gizmo",
        "gizmo",
    )
    assert [corpus.documents[i] for i in first.related] == ["Alpha paragraph about widgets."]


def documents(text: str) -> list[str]:
    context = text.split("The following are given documents.\n\n", 1)[1].split("\n\nAnswer the question", 1)[0]
    parts = re.split(r"(?:^|\n\n)Document (\d+):\n", context)[1:]
    assert parts[0::2] == [str(i + 1) for i in range(len(parts) // 2)]
    return parts[1::2]


def test_qa_sample_holds_its_gold_paragraph_then_its_article_then_the_rest():
    corpus = squad_corpus(SQUAD)
    sample = QuestionAnswering(corpus, 9, 0).build(2)
    assert sorted(documents(sample.text)) == ["Alpha paragraph about widgets.", "Zeta paragraph about gizmos."]
    assert sample.text.endswith("\n\nQuestion: Which gizmo?") and sample.answer_prefix == qa.ANSWER_PREFIX
    assert sample.expected == ["blue gizmo", "gizmo"]
    smaller, larger = (set(documents(QuestionAnswering(corpus, 9, 2).build(n).text)) for n in (12, 22))
    assert "Beta paragraph." in smaller and smaller < larger and len(larger) == 22
    whole = documents(QuestionAnswering(corpus, 9, 1).build(40).text)
    assert Counter(whole) == Counter(list(corpus.documents) + list(corpus.documents[:7]))
    assert strictly_growing(QuestionAnswering(corpus, 9, 2).build, range(2, 33, 5))


def test_qa_every_sample_of_a_length_puts_its_gold_document_at_the_same_place():
    corpus = squad_corpus(SQUAD)
    places = {tuple(QuestionAnswering(corpus, 4, n).build(20).data["gold_documents"]) for n in range(3)}
    assert len(places) == 1


def test_hotpotqa_sample_holds_all_ten_paragraphs_of_its_question():
    rows = [
        {
            "question": f"Q{i}?",
            "answer": f"A{i}",
            "context": [[f"Title {i}-{j}", [f"Sentence {j}a. ", f"Sentence {j}b."]] for j in range(10)],
        }
        for i in range(4)
    ]
    corpus = hotpotqa_corpus(rows)
    assert len(corpus.documents) == 40 and "Title 0-3\nSentence 3a. Sentence 3b." in corpus.documents
    sample = QuestionAnswering(corpus, 1, 2).build(15)
    shown = documents(sample.text)
    assert {f"Title 2-{j}\nSentence {j}a. Sentence {j}b." for j in range(10)} <= set(shown) and len(shown) == 15
    assert sample.expected == ["A2"] and len(sample.data["gold_documents"]) == 10
    with pytest.raises(ValueError):
        QuestionAnswering(corpus, 1, 2).build(9)
    with pytest.raises(ValueError):
        QuestionAnswering(corpus, 1, 4)


# --- draws -----------------------------------------------------------------------------------------------------


def test_draws_of_a_growing_sample_keep_their_prefix_and_permutations_are_complete():
    draws = [distinct_indices(Draws("k"), 1000, k) for k in (5, 50, 1000)]
    assert draws[1][:5] == draws[0] and draws[2][:50] == draws[1] and sorted(draws[2]) == list(range(1000))
    # Drawn once for every size: a sample built at one size, then others, draws as it would at each alone.
    growing = DistinctIndices(Draws("k"), 1000)
    sizes = (50, 5, 1000, 20, 0)
    assert [growing.first(k) for k in sizes] == [distinct_indices(Draws("k"), 1000, k) for k in sizes]
    order = permutation(Draws("k"), 5000)
    assert sorted(order) == list(range(5000)) and order != list(range(5000))
    assert order == permutation(Draws("k"), 5000) != permutation(Draws("j"), 5000)
    # A length's fixed arrangement (every sample's, kept once made) is the permutation its key draws.
    drawn = permutation(Draws("ruler-cwe", (7, "cwe"), "order", 300), 300)
    assert list(fixed_order("ruler-cwe", (7, "cwe"), 300)) == drawn


def test_word_lists_are_wonderwords_2_2_0_byte_for_byte():
    import hashlib
    from importlib import resources

    folder = resources.files("nspec.compiler.tasks.ruler").joinpath("wonderwords")
    digests = {
        name: hashlib.sha256(folder.joinpath(f"{name}.txt").read_bytes()).hexdigest()[:12]
        for name in ("nounlist", "adjectivelist", "verblist")
    }
    assert digests == {"nounlist": "0778f51872f2", "adjectivelist": "66814d46b7e2", "verblist": "9fbf5e4e69b8"}
