"""The rules the schema cannot express, each with its exact message."""

import pytest

from nspec.errors import SpecError
from nspec.spec import load_spec
from tests.conftest import BASE


def issues(spec_file, text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(spec_file(text))
    return [str(i) for i in info.value.issues]


def test_minimal_spec_loads(spec_file):
    assert load_spec(spec_file(BASE)).data["name"] == "t"


def test_needle_placeholder_must_be_a_variable(spec_file):
    text = BASE.replace('question: "What is the number?"', 'question: "What is the {kind} number?"')
    assert issues(spec_file, text) == [
        "spec.yaml:6:15: needles[0].question: unknown placeholder {kind}; this needle (its `vars`) may use {n}"
    ]


def test_unused_variable(spec_file):
    text = BASE.replace("vars: {n: {digits: 7}}", "vars: {n: {digits: 7}, city: {choice: cities}}")
    assert issues(spec_file, text) == ["spec.yaml:8:28: needles[0].vars.city: variable 'city' is never used"]


def test_variable_missing_from_needle_text(spec_file):
    text = BASE.replace('text: "The number is {n}."', 'text: "The number is secret."')
    assert issues(spec_file, text) == [
        "spec.yaml:8:12: needles[0].vars.n: variable 'n' does not appear in the needle's `text`, "
        "so the answer cannot be found in the context"
    ]


def test_variable_needs_exactly_one_kind(spec_file):
    assert issues(spec_file, BASE.replace("{n: {digits: 7}}", "{n: {digits: 7, uuid: true}}")) == [
        "spec.yaml:8:15: needles[0].vars.n: takes only one of choice, digits, uuid, words, but has digits and uuid"
    ]
    assert issues(spec_file, BASE.replace("{n: {digits: 7}}", "{n: {scope: cell}}")) == [
        "spec.yaml:8:15: needles[0].vars.n: needs one of: choice, digits, uuid, words"
    ]


def test_unknown_builtin_list(spec_file):
    text = BASE.replace("{n: {digits: 7}}", "{n: {choice: citys}}")
    assert issues(spec_file, text) == [
        'spec.yaml:8:24: needles[0].vars.n.choice: must be one of cities, colors, names, words or a list (got "citys")'
    ]


def test_identical_copies_are_refused(spec_file):
    text = BASE.replace("{n: {digits: 7}}", "{n: {digits: 7, scope: cell}}").replace(
        '    answer: "{n}"', '    answer: "{n}"\n    count: 3'
    )
    assert issues(spec_file, text) == [
        "spec.yaml:5:5: needles[0]: copies of this needle would all be identical: give it a variable with "
        "`scope: instance` (the default)"
    ]


def test_haystack_needs_exactly_one_kind(spec_file):
    assert issues(spec_file, BASE.replace("{corpus: austen}", "{separator: ' '}")) == [
        "spec.yaml:3:11: haystack: needs one of: corpus, files, noise, stack"
    ]
    assert issues(spec_file, BASE.replace("{corpus: austen}", "{corpus: austen, noise: true}")) == [
        "spec.yaml:3:11: haystack: takes only one of corpus, files, noise, stack, but has corpus and noise"
    ]


def test_haystack_files_must_match(spec_file):
    assert issues(spec_file, BASE.replace("{corpus: austen}", "{files: ['docs/*.txt']}")) == [
        "spec.yaml:3:20: haystack.files[0]: no file matches 'docs/*.txt' (relative to the spec's folder)"
    ]


def test_haystack_files_relative_to_the_spec(spec_file, tmp_path):
    spec_file("essay one.", "sub/docs/a.txt")
    load_spec(spec_file(BASE.replace("{corpus: austen}", "{files: 'docs/*.txt'}"), "sub/spec.yaml"))


def test_stack_takes_no_needles_and_needs_files(spec_file):
    text = BASE.replace("{corpus: austen}", "{stack: {items: items.jsonl, questions: q.jsonl}}")
    assert sorted(issues(spec_file, text)) == [
        "spec.yaml:3:27: haystack.stack.items: no such file: 'items.jsonl' (relative to the spec's folder)",
        "spec.yaml:3:51: haystack.stack.questions: no such file: 'q.jsonl' (relative to the spec's folder)",
        "spec.yaml:4:1: needles: `needles` does not apply to the stack task family: remove it",
    ]


def test_text_haystack_needs_needles_and_no_repeats(spec_file):
    text = BASE.replace("needles:", "other:").replace("depths: [50]}", "depths: [50], repeats: [1, 5]}")
    assert "spec.yaml:1:1: missing `needles`: what to hide in the haystack" in issues(spec_file, text)
    assert "spec.yaml:9:47: grid.repeats: `repeats` does not apply to the needle task family: remove it" in issues(
        spec_file, text
    )


def test_prompt_or_prompts(spec_file):
    assert issues(spec_file, BASE.replace('prompt: {user: "{haystack} {question}"}\n', "")) == [
        "spec.yaml:1:1: missing `prompt` (or `prompts`, a list of named variants): how cells are put to models"
    ]
    both = BASE + 'prompts: [{name: a, user: "{haystack} {question}"}]\n'
    assert issues(spec_file, both) == ["spec.yaml:12:1: prompts: give either `prompt` or `prompts`, not both"]


def test_prompt_variant_names_unique(spec_file):
    text = BASE.replace(
        'prompt: {user: "{haystack} {question}"}',
        'prompts:\n  - {name: a, user: "{haystack} {question}"}\n  - {name: a, user: "{question} {haystack}"}',
    )
    assert issues(spec_file, text) == ["spec.yaml:12:12: prompts[1].name: prompt variant 'a' is defined twice"]


def test_question_must_be_shown(spec_file):
    text = BASE.replace('"{haystack} {question}"', '"{haystack}"')
    assert issues(spec_file, text) == [
        "spec.yaml:10:9: prompt: the question is never shown to the model: put {question} in `user`"
    ]
    assert load_spec(spec_file(text.replace("prompt: {", 'prompt: {system: "Answer: {question}", ')))


def test_model_prompt_override_checked(spec_file):
    text = BASE.replace("{id: openai/gpt-4.1-mini}", '{id: openai/gpt-4.1-mini, prompt: {user: "{question}"}}')
    assert issues(spec_file, text) == [
        "spec.yaml:11:51: models[0].prompt.user: the user template must contain {haystack} exactly once (found 0)"
    ]


def test_prefill_may_not_use_haystack(spec_file):
    text = BASE.replace("prompt: {user:", 'prompt: {prefill: "{haystack}", user:').replace(
        "openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5"
    )
    assert issues(spec_file, text) == [
        "spec.yaml:10:19: prompt.prefill: unknown placeholder {haystack}; `prefill` may use {question}"
    ]


def test_lengths_must_exceed_reserve(spec_file):
    text = BASE.replace("[1000]", "[200, 1000]")
    assert issues(spec_file, text) == [
        "spec.yaml:9:25: grid.context_lengths: context length 200 leaves no room for the prompt: it must exceed "
        "reserve_tokens (300, prompt.reserve_tokens)"
    ]


def test_range_from_above_to(spec_file):
    text = BASE.replace("[1000]", "{from: 9000, to: 1000, steps: 3}")
    assert issues(spec_file, text) == [
        "spec.yaml:9:25: grid.context_lengths: `from` (9000) is greater than `to` (1000)"
    ]


def test_range_with_duplicate_values(spec_file):
    text = BASE.replace("depths: [50]", "depths: {from: 0, to: 2, steps: 10}")
    assert issues(spec_file, text) == [
        "spec.yaml:9:41: grid.depths: the range gives duplicate values (0.0, 1.0, 2.0): use fewer steps"
    ]


def test_model_ids(spec_file):
    result = issues(spec_file, BASE.replace("openai/gpt-4.1-mini", "gpt-4.1-mini"))
    assert result == [
        "spec.yaml:11:15: models[0].id: 'gpt-4.1-mini' is not allowed here: write provider/model, "
        "e.g. openai/gpt-4.1-mini or anthropic/claude-haiku-4-5"
    ]
    result = issues(spec_file, BASE.replace("openai/gpt-4.1-mini", "gemini/gemini-2.5-flash"))
    assert result == [
        "spec.yaml:11:15: models[0].id: unknown provider 'gemini' (Gemini models are google/<model>): the installed "
        "providers are anthropic, azure, google, groq, local, mistral, openai, openai-compatible, together, xai"
    ]


def test_model_labels_unique(spec_file):
    text = BASE.replace("[{id: openai/gpt-4.1-mini}]", "[{id: openai/gpt-4.1-mini}, {id: openai/gpt-4.1-mini}]")
    assert issues(spec_file, text) == [
        "spec.yaml:11:37: models[1]: model 'openai/gpt-4.1-mini' appears twice; give one of them a distinct `name`"
    ]
    assert load_spec(spec_file(text.replace("}]", ", name: second}]")))


def test_openai_compatible_needs_base_url_and_batch_api(spec_file):
    text = BASE.replace("{id: openai/gpt-4.1-mini}", "{id: openai-compatible/llama-3, mode: batch}")
    assert issues(spec_file, text) == [
        "spec.yaml:11:10: models[0]: an openai-compatible model needs `base_url`",
        "spec.yaml:11:48: models[0].mode: `mode: batch` on an openai-compatible server needs `batch_api: true`",
    ]


def test_max_tokens_within_reserve(spec_file):
    text = BASE.replace("{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, params: {max_tokens: 500}}")
    assert issues(spec_file, text) == [
        "spec.yaml:11:57: models[0].params.max_tokens: max_tokens (500) exceeds reserve_tokens (300): the answer "
        "could overflow the context length; raise reserve_tokens or lower max_tokens"
    ]


def test_reserved_params(spec_file):
    text = BASE.replace("{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, params: {messages: []}}")
    assert issues(spec_file, text) == [
        "spec.yaml:11:45: models[0].params.messages: `messages` is set by nspec from the spec; remove it"
    ]


def test_tokenizer_rules(spec_file):
    text = BASE.replace(
        "{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, tokenizer: {name: o200k_base, factor: 1.2}}"
    )
    assert issues(spec_file, text) == [
        "spec.yaml:11:66: models[0].tokenizer.factor: `factor` applies to the proxy tokenizer only"
    ]
    text = BASE.replace("{id: openai/gpt-4.1-mini}", "{id: openai/gpt-4.1-mini, tokenizer: model}")
    assert issues(spec_file, text) == [
        "spec.yaml:11:47: models[0].tokenizer: `tokenizer: model` (the model's own) is available for local models only"
    ]


JUDGE = "scoring:\n  - contains: '{answer}'\n  - judge: {models: [openai/gpt-4.1-mini], %s}\n"


def test_judge_rubric_and_threshold(spec_file):
    assert issues(spec_file, BASE + JUDGE % "rubric: score-10") == [
        "spec.yaml:14:12: scoring[1].judge: rubric score-10 without `threshold` gives scores, not verdicts, so the "
        "judges must grade every cell alone: give `threshold` (the lowest score that passes, e.g. 7) or leave the "
        "judge alone in scoring"
    ]
    alone = load_spec(spec_file(BASE + "scoring:\n  - judge: {models: [openai/gpt-4.1-mini], rubric: score-10}\n"))
    assert alone.data["scoring"] == [{"judge": {**alone.data["scoring"][0]["judge"], "rubric": "score-10"}}]
    assert "threshold" not in alone.data["scoring"][0]["judge"]
    assert issues(spec_file, BASE + JUDGE % "threshold: 7") == [
        "spec.yaml:14:44: scoring[1].judge.threshold: `threshold` applies to rubric score-10 only"
    ]
    assert load_spec(spec_file(BASE + JUDGE % "rubric: score-10, threshold: 7"))


def test_judge_must_be_last_and_single(spec_file):
    text = BASE + "scoring:\n  - judge: {models: [openai/gpt-4.1-mini]}\n  - contains: '{answer}'\n"
    assert issues(spec_file, text) == [
        "spec.yaml:13:5: scoring[0]: the `judge` entry must come last: it grades what the scorers above it leave "
        "undecided"
    ]


def test_judge_listed_twice(spec_file):
    text = BASE + JUDGE.replace("[openai/gpt-4.1-mini]", "[openai/gpt-4.1-mini, openai/gpt-4.1-mini]") % "vote: any"
    assert issues(spec_file, text) == [
        "spec.yaml:14:43: scoring[1].judge.models[1]: judge 'openai/gpt-4.1-mini' is listed twice"
    ]


def test_scorer_takes_one_kind(spec_file):
    text = BASE + "scoring:\n  - {contains: '{answer}', exact: '{answer}'}\n"
    assert issues(spec_file, text) == [
        "spec.yaml:13:5: scoring[0]: has 2 keys (contains, exact) but takes exactly one of: all_of, auto, contains, "
        "exact, judge, number, rails, regex, ruler, sequence_ratio, set_f1, string_match_all, string_match_part"
    ]


@pytest.mark.parametrize(
    "scoring, message",
    [
        (
            "  - regex: '([0-9]+'\n",
            "spec.yaml:13:12: scoring[0].regex: not a valid regular expression: missing ), unterminated subpattern "
            "at position 0",
        ),
        (
            "  - regex: {pattern: '[a-'}\n",
            "spec.yaml:13:22: scoring[0].regex.pattern: not a valid regular expression: unterminated character set "
            "at position 0",
        ),
        (
            "  - judge: {models: [gpt-4.1-mini]}\n",
            "spec.yaml:13:22: scoring[0].judge.models[0]: 'gpt-4.1-mini' is not allowed here: write provider/model",
        ),
        (
            "  - judge: {models: [openai/gpt-4.1-mini], rubric: score-10, threshold: 11}\n",
            "spec.yaml:13:73: scoring[0].judge.threshold: must be at most 10 (got 11)",
        ),
        (
            "  - judge: {models: [openai/gpt-4.1-mini], rubric: score-10, threshold: 0}\n",
            "spec.yaml:13:73: scoring[0].judge.threshold: must be at least 1 (got 0)",
        ),
        (
            "  - judge: {models: [openai/gpt-4.1-mini, openai/gpt-4o], quorum: 3}\n",
            "spec.yaml:13:67: scoring[0].judge.quorum: a quorum of 3 can never be reached by a panel of 2 judges",
        ),
        (
            "  - all_of: {threshold: 1.5}\n",
            "spec.yaml:13:25: scoring[0].all_of.threshold: must be at most 1 (got 1.5)",
        ),
    ],
)
def test_a_scoring_section_that_cannot_work_is_refused_at_validate(spec_file, scoring, message):
    (issue,) = issues(spec_file, BASE + "scoring:\n" + scoring)
    assert issue.startswith(message), issue


def test_scorer_template_placeholders(spec_file):
    text = BASE + "scoring:\n  - contains: '{number}'\n"
    assert issues(spec_file, text) == [
        "spec.yaml:13:15: scoring[0].contains: unknown placeholder {number}; `contains` may use {answer}"
    ]


def test_regex_braces_are_not_placeholders(spec_file):
    assert load_spec(spec_file(BASE + "scoring:\n  - regex: '\\b\\d{7}\\b'\n"))


def test_all_errors_reported_at_once(spec_file):
    text = (
        BASE.replace("name: t", "name: 1.5")
        .replace("depths: [50]", "depths: [150]")
        .replace('"{haystack} {question}"', '"{question}"')
        + "colour: red\n"
    )
    assert len(issues(spec_file, text)) == 4


def test_a_prefill_goes_only_to_models_that_continue_one(spec_file):
    both = BASE.replace(
        'prompt: {user: "{haystack} {question}"}', 'prompt: {user: "{haystack} {question}", prefill: "It is"}'
    ).replace(
        "models: [{id: openai/gpt-4.1-mini}]", "models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5}]"
    )
    assert issues(spec_file, both) == [
        "spec.yaml:10:50: prompt.prefill: openai/gpt-4.1-mini (models[0]) cannot continue a prefill: its API reads a "
        "final assistant message as an earlier turn, not as the start of its answer; give the prefill only to models "
        "that take one (their own `prompt: {prefill: ...}`)"
    ]
    own = BASE.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        "models: [{id: openai/gpt-4.1-mini}, {id: anthropic/claude-haiku-4-5, prompt: {prefill: 'It is'}}]",
    )
    assert load_spec(spec_file(own, "own.yaml")).data
    vllm = BASE.replace(
        "models: [{id: openai/gpt-4.1-mini}]",
        "models: [{id: openai-compatible/m, base_url: 'http://127.0.0.1:8000/v1', prompt: {prefill: 'It is'},"
        " params: {continue_final_message: true}}]",
    )
    assert load_spec(spec_file(vllm, "vllm.yaml")).data


def test_a_misspelt_model_is_named_in_the_rule_its_id_breaks(spec_file):
    """A misspelt Claude id reads as a model that takes no prefill: the refusal says what to fix, the spelling."""
    text = BASE.replace("models: [{id: openai/gpt-4.1-mini}]", "models: [{id: anthropic/claude-hiaku-4-5}]")
    text = text.replace('user: "{haystack} {question}"', 'user: "{haystack} {question}", prefill: "It is"')
    (issue,) = issues(spec_file, text)
    assert "prompt.prefill: anthropic/claude-hiaku-4-5 (models[0]) cannot continue a prefill" in issue
    assert issue.endswith(
        "(is 'anthropic/claude-hiaku-4-5' misspelt? did you mean 'anthropic/claude-haiku-4-5' or "
        "'anthropic/claude-opus-4-5'?)"
    )
