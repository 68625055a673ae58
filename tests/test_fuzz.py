"""The spec fuzzer (tests/fuzz.py) in the test suite: a few hundred seeded mutants of the example specs through
validate, plan and compile, each under a time and a memory cap. Every case must end in exit 0 or 2, with no
traceback; the `slow` run takes thousands."""

from __future__ import annotations

import pytest

from tests.fuzz import campaign


def check(cases: int, seed: int) -> None:
    result = campaign(seed, cases)
    print(f"\n{result.run} fuzz cases in {result.seconds:.0f} s; exit codes: {dict(result.codes)}")
    assert not result.failures, "\n".join(result.failures[:10])
    assert sum(n for codes, n in result.codes.items() if codes.startswith("0")) > 0  # some mutants are valid


def test_fuzzed_specs_end_in_exit_0_or_2():
    check(200, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4, 5, 6])
def test_fuzzed_specs_many(seed):
    check(1000, seed)
