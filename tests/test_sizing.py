"""RULER's ways of meeting a length: the largest size on its step that fits (before 2025-06), the largest whole size
that fits (searched once since), each found in few builds."""

import math
import random

import pytest

from nspec.compiler.tasks.sizing import NEVER, largest_fitting, largest_within


@pytest.mark.parametrize("step", [1, 5, 25, 500])
@pytest.mark.parametrize("limit", [None, 700])
@pytest.mark.parametrize("capacity", [0, 4, 5, 499, 500, 501, 1000, 12_345, 100_000])
def test_the_largest_fitting_size_is_the_one_ruler_s_linear_growth_stops_at(capacity, step, limit):
    calls = []

    def fits(size):
        calls.append(size)
        return size <= capacity

    linear = 0  # RULER: grow by step while the next size still fits
    while fits(linear + step) and (limit is None or linear + step <= limit):
        linear += step
    calls.clear()
    assert largest_fitting(fits, step, limit) == linear
    assert len(calls) <= 2 * max(1, (capacity // step + 1).bit_length()) + 2
    for near in (0, 1, step, linear, linear + step, 3 * linear + 7, 10**6):  # a hint never changes the answer
        assert largest_fitting(fits, step, limit, near=near) == linear
    if linear:  # a right hint costs a call or three
        calls.clear()
        largest_fitting(fits, step, limit, near=linear)
        assert len(calls) <= 3


def test_a_step_that_is_not_positive_is_a_bug():
    with pytest.raises(ValueError):
        largest_fitting(lambda size: True, 0)


@pytest.mark.parametrize("lowest", [1, 5, 25, 500])
@pytest.mark.parametrize("limit", [None, 300, 70_000])
@pytest.mark.parametrize("per_unit, fixed", [(0.4, 0), (1.3, 90), (7.0, 310), (38.5, 12)])
@pytest.mark.parametrize("room", [50, 4_000, 131_000])
def test_the_largest_whole_size_within_the_room_is_ruler_s_binary_search_s_in_a_handful_of_counts(
    lowest, limit, per_unit, fixed, room
):
    calls = []

    def count(size):  # near-linear and growing, as a prompt's tokens are
        calls.append(size)
        return fixed + int(per_unit * size) + size // 3

    floor = lowest if limit is None else min(lowest, limit)
    lower, upper, found = floor, max(3 * room, 2 * floor), None  # RULER's binary search, bounds as it sets them
    if limit is not None:
        upper = min(upper, limit)
    while lower <= upper:
        middle = (lower + upper) // 2
        if count(middle) <= room:
            found, lower = middle, middle + 1
        else:
            upper = middle - 1
    calls.clear()
    assert largest_within(count, room, lowest, limit) == (found or 0)
    assert len(calls) <= 12


@pytest.mark.parametrize("per_unit", [1.2, 3.0, 16.0, 1200.0])
@pytest.mark.parametrize("fixed", [20, 1500, 40_000])
@pytest.mark.parametrize("room", [3_000, 130_944])
def test_a_search_of_uneven_counts_takes_a_handful_and_from_a_hint_two_or_three(per_unit, fixed, room):
    """Counts as a sample's are: near-linear, a unit adding more or fewer tokens (words of one token or two)."""
    calls = []

    def count(size):
        calls.append(size)
        return fixed + int(per_unit * size) + (size * 2654435761 % 997) * int(per_unit) // 997

    exact = next((k for k in range(1, 10**6) if count(k + 1) > room), 0) if count(1) <= room else 0
    calls.clear()
    assert largest_within(count, room) == exact
    assert len(calls) <= 7
    for near in (1, exact - 3, exact - 1, exact, exact + 1, exact + 40, 10**6):  # a hint never changes the answer
        calls.clear()
        assert largest_within(count, room, near=max(1, near)) == exact
        if exact and abs(near - exact) <= 1:  # another model's size, on the same sample: two counts or three
            assert len(calls) <= 3


def test_a_search_of_any_count_that_does_not_fall_is_right_in_range_and_logarithmic():
    """Counts no prompt has, but a family could: flat stretches, a jump, faster than a line, one that never grows."""
    rng = random.Random(11)
    shapes = {
        "flat stretches": lambda k: 40 + 7 * (k // 37 * 37),
        "a jump": lambda k: 0 if k < 939 else 10**9,
        "faster than a line": lambda k: 3 * (k - 1) ** 3,
        "flat": lambda k: 1000,
    }
    for _ in range(300):
        name, count = rng.choice(list(shapes.items()))
        lowest, limit = rng.choice([1, 5, 500]), rng.choice([None, 300, 26_320])
        room, near = rng.choice([999, 10**9 - 1, 10**13, rng.randint(0, 10**6)]), rng.choice([None, 1, 7928, 10**6])
        lo = lowest if limit is None else min(lowest, limit)
        calls = []

        def counted(k, count=count, lo=lo, limit=limit, calls=calls):
            assert k >= lo and (limit is None or k <= limit), f"{k} is outside [{lo}, {limit}]"
            calls.append(k)
            return count(k)

        try:
            found = largest_within(counted, room, lowest, limit, near)
        except ValueError as refused:  # it fits at sizes no context has: a family's bug, said
            assert limit is None and count(NEVER) <= room and "does not grow" in str(refused), name
            continue
        assert not (name == "flat" and limit is None and room >= 1000), "a count that never grows ran to an answer"
        if count(lo) > room:
            assert found == 0, name
        else:
            assert count(found) <= room and (found == limit or count(found + 1) > room), name
        span = max(2, (limit or max(found, near or 1) * 2) - lo + 2)
        assert len(calls) <= 2 * math.log2(span) + 10, (name, len(calls), span)


def test_a_context_that_never_grows_is_a_family_s_bug_said_not_an_endless_search():
    with pytest.raises(ValueError, match="does not grow"):
        largest_fitting(lambda size: True, 25)
    with pytest.raises(ValueError, match="does not grow"):
        largest_within(lambda size: 7, 100)
