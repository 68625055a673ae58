"""RULER's way of meeting a length: the largest size on its step that fits, found in O(log n) builds."""

import pytest

from nspec.compiler.tasks.ruler.base import largest_fitting


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
