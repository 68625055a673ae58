"""Grid axes: needlehaystack's formulas, checked against hand-computed values."""

import itertools
import math

from nspec.compiler.grid import context_lengths, depths


def test_lists_pass_through():
    assert context_lengths([4000, 1000]) == [4000, 1000]
    assert depths([0, 33.3, 100]) == [0.0, 33.3, 100.0]


def test_linear_lengths_like_needlehaystack():
    # round(linspace(1000, 128000, 15)): the step is 9071.43
    got = context_lengths({"from": 1000, "to": 128000, "steps": 15})
    assert got[:4] == [1000, 10071, 19143, 28214]
    assert got[-1] == 128000 and len(got) == 15


def test_log_lengths():
    got = context_lengths({"from": 1000, "to": 128000, "steps": 8, "spacing": "log"})
    assert got[0] == 1000 and got[-1] == 128000
    ratios = [b / a for a, b in itertools.pairwise(got)]
    assert all(abs(r - 2.0) < 0.01 for r in ratios)  # 128000/1000 = 2^7 over 7 intervals


def test_single_step_is_the_start():
    assert context_lengths({"from": 5000, "to": 9000, "steps": 1}) == [5000]


def test_linear_depths():
    assert depths({"steps": 5}) == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert depths({"from": 10, "to": 20, "steps": 3}) == [10.0, 15.0, 20.0]


def test_sigmoid_depths_keep_ends_and_cluster_near_them():
    got = depths({"from": 0, "to": 100, "steps": 15, "spacing": "sigmoid"})
    assert got[0] == 0.0 and got[-1] == 100.0 and len(got) == 15
    x = 100 / 14  # the second linear point
    assert round(100 / (1 + math.exp(0.1 * (x - 50))), 3) in got
    assert got[1] == round(100 / (1 + math.exp(0.1 * (100 - x - 50))), 3)
    gaps = [b - a for a, b in itertools.pairwise(got)]
    assert gaps[0] < gaps[len(gaps) // 2]  # denser near the ends than in the middle
