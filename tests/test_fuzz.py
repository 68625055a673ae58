"""The spec fuzzer (tests/fuzz.py) in the test suite: eighty seeded mutants of the example specs through
validate, plan and compile, each under a time and a memory cap. Every case must end in exit 0 or 2, with no
traceback; the `slow` run takes thousands."""

from __future__ import annotations

import pytest

from tests.fuzz import campaign


def check(cases: int, seed: int, part: int = 0, parts: int = 1) -> None:
    result = campaign(seed, cases, part, parts)
    print(f"\n{result.run} fuzz cases in {result.seconds:.0f} s; exit codes: {dict(result.codes)}")
    assert not result.failures, "\n".join(result.failures[:10])
    assert sum(n for codes, n in result.codes.items() if codes.startswith("0")) > 0  # some mutants are valid


@pytest.mark.parametrize("part", [0, 1])
def test_fuzzed_specs_end_in_exit_0_or_2(part):
    check(80, seed=1, part=part, parts=2)  # one campaign in two halves, so that the halves can run side by side


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4, 5, 6])
def test_fuzzed_specs_many(seed):
    check(1000, seed)
