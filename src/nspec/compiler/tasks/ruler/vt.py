"""RULER's variable tracking (`vt`): chains of assignments ``VAR X = 12345``, ``VAR Y = VAR X ``, ... hidden among
repeated noise sentences; the model names every variable that holds the first chain's value. Rebuilt from
NVIDIA/RULER ``scripts/data/synthetic/variable_tracking.py`` with the template and answer prefix of its
``constants.py``, word for word.

A sample opens with RULER's one-shot example: a short vt prompt of its own (3-letter names, value 12345, as many noise
lines as keep it within 500 tokens, its answer appended), built once per task and length, then given fresh names and a
fresh value for each sample, as RULER's ``randomize_icl`` does.

Size: the number of noise lines (each line is the five noise sentences). RULER's ``incremental`` is 10 lines (5 when
the length is below 4096); since 2025-06 RULER binary-searches every whole number of lines from there up, before that
it grew by ``incremental``. A size below ``num_hops + 1`` has no room for a chain (RULER cannot build it either).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Hashable, Sequence

from nspec.compiler.draws import Draws
from nspec.compiler.tasks.ruler.sampling import distinct_indices
from nspec.compiler.tasks.sizing import Built, largest_fitting

TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above."
)
ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the "
    "value {query}, they are: "
)
TOKENS_TO_GENERATE = 30
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
INCREMENTAL = 10  # noise lines; 5 when the length is below 4096
SHORT_INCREMENTAL = 5
ICL_TOKENS = 500  # the one-shot example's length budget, no tokens to generate
ICL_VALUE = "12345"
ICL_NAME_LETTERS = 3
NAME_LETTERS = 5


def incremental(max_seq_length: int) -> int:
    """RULER's step in noise lines at a length."""
    return SHORT_INCREMENTAL if max_seq_length < 4096 else INCREMENTAL


def _names(draws: Draws, count: int, letters: int) -> list[str]:
    """``count`` distinct names of ``letters`` capital letters. (RULER draws with replacement and tops the list up when
    a name repeats, which can misalign its chains; distinct names are what it means.)"""
    names: list[str] = []
    while len(names) < count:
        name = "".join(draws.choice(string.ascii_uppercase) for _ in range(letters))
        if name not in names:
            names.append(name)
    return names


def _value(draws: Draws) -> str:
    """RULER's ``np.random.randint(10000, 99999)``: 10000 to 99998."""
    return str(10000 + draws.below(89999))


def _chains(names: Sequence[str], values: Sequence[str], num_hops: int) -> list[list[str]]:
    """RULER's chain lines: the first assigns the value, each next one the previous variable (with RULER's trailing
    space)."""
    chains = []
    for c, value in enumerate(values):
        chain_names = names[c * (num_hops + 1) : (c + 1) * (num_hops + 1)]
        lines = [f"VAR {chain_names[0]} = {value}"]
        lines += [f"VAR {chain_names[j + 1]} = VAR {chain_names[j]} " for j in range(num_hops)]
        chains.append(lines)
    return chains


def _context(noise_lines: int, chains: Sequence[Sequence[str]], positions: Draws) -> str:
    """RULER's noise haystack: ``noise_lines`` noise lines, each chain's lines inserted in order at distinct places
    drawn among the lines there are at that point, joined by newlines."""
    if noise_lines < max(len(chain) for chain in chains):
        raise ValueError(f"{noise_lines} noise lines leave no room for a chain of {len(chains[0])} lines")
    sentences = [NOISE] * noise_lines
    for chain in chains:
        places = sorted(distinct_indices(positions, len(sentences), len(chain)))
        for j, place in enumerate(places):
            sentences.insert(place + j, chain[j])
    return "\n".join(sentences).replace(". \n", ".\n")


def _prompt(context: str, value: str, num_hops: int) -> tuple[str, str]:
    return TEMPLATE.format(context=context, query=value), ANSWER_PREFIX.format(num_v=num_hops + 1, query=value)


class VariableTracking:
    """The vt samples of one task at one length. ``seed`` is the task's (RULER's one ``--random_seed`` per run),
    ``sample`` the sample's number; ``count`` counts tokens of the model's tokenizer, for the one-shot example's 500."""

    def __init__(
        self,
        seed: Hashable,
        sample: int,
        count: Callable[[str], int],
        num_chains: int = 1,
        num_hops: int = 4,
    ) -> None:
        if num_chains < 1 or num_hops < 1:
            raise ValueError("vt needs at least one chain of at least one hop")
        self.seed, self.sample, self.count = seed, sample, count
        self.num_chains, self.num_hops = num_chains, num_hops

    @functools.cached_property
    def _icl(self) -> str:
        """RULER's one-shot example before renaming: its prompt with the answer prefix, a space and its answer, then a
        newline. The same for every sample of the task."""
        hops = min(10, self.num_hops)
        names = _names(Draws("ruler-vt", self.seed, "icl-names"), self.num_chains * (hops + 1), ICL_NAME_LETTERS)
        chains = _chains(names, [ICL_VALUE] * self.num_chains, hops)

        def text(noise_lines: int) -> str:
            question, prefix = _prompt(
                _context(noise_lines, chains, Draws("ruler-vt", self.seed, "icl-places", noise_lines)), ICL_VALUE, hops
            )
            return question + prefix

        # RULER searches from 5 lines up and takes 5 when even that is too long.
        least = max(SHORT_INCREMENTAL, hops + 1)
        lines = least + largest_fitting(lambda more: self.count(text(least + more)) <= ICL_TOKENS, 1)
        return text(lines) + " " + " ".join(names[: hops + 1]) + "\n"

    def _renamed_icl(self, draws: Draws) -> str:
        """RULER's ``randomize_icl``: each name of the example's answer replaced everywhere by fresh letters, in turn,
        then its value 12345 by a fresh value."""
        example = self._icl
        for name in example.strip().split()[-self.num_hops - 1 :]:
            example = example.replace(name, "".join(draws.choice(string.ascii_uppercase) for _ in range(len(name))))
        return example.replace(ICL_VALUE, _value(draws))

    def build(self, size: int) -> Built:
        """The sample with ``size`` noise lines. The names, values and the renamed example are the same at every size;
        only where the chains sit is drawn anew."""
        draws = Draws("ruler-vt", self.seed, self.sample)
        names = _names(draws, self.num_chains * (self.num_hops + 1), NAME_LETTERS)
        values = [_value(draws) for _ in range(self.num_chains)]
        example = self._renamed_icl(draws)
        chains = _chains(names, values, self.num_hops)
        context = _context(size, chains, Draws("ruler-vt", self.seed, self.sample, "places", size))
        question, prefix = _prompt(context, values[0], self.num_hops)
        return Built(
            text=example + "\n" + question,
            answer_prefix=prefix,
            expected=names[: self.num_hops + 1],
            data={"noise_lines": size, "value": values[0]},
        )
