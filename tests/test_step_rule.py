"""The step rule by hand: durations, the W split, the F&B slot and the send."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine import step_rule as rule
from simulator.schedules import build_schedule


def test_w_split_and_where_the_gradients_are_done():
    steps = [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0), ("W", 0, 0)]
    split = rule.split_pairs(steps)
    assert split == {(0, 0)}
    assert rule.is_split(("B", 0, 0), split) and not rule.is_split(("B", 1, 0), split)
    assert rule.grad_done(steps, split) == {0: 4}  # the W after the unsplit B of mb 1


def test_durations_one_by_one_and_at_once():
    f, b, w = 3.0, 5.0, 2.0
    assert rule.duration("F", f, b, w, False) == 3.0
    assert rule.duration("W", f, b, w, True) == 2.0
    assert rule.duration("B", f, b, w, True) == 3.0 and rule.duration("B", f, b, w, False) == 5.0
    code, cut = np.array([0, 1, 1, 2]), np.array([False, True, False, False])
    many = rule.durations(code, np.full(4, f), np.full(4, b), np.full(4, w), cut)
    assert many.tolist() == [3.0, 3.0, 5.0, 2.0]


def test_fused_slot_hides_each_phases_all_to_all_under_the_other():
    # hidden = min(ef, db - eb) + min(eb, df - ef) = min(1, 3) + min(2, 2) = 3
    assert rule.fused_slot(3.0, 5.0, 1.0, 2.0, 0.1) == pytest.approx(8.0 - 3.0 * 0.9)
    assert rule.fused_slot(3.0, 5.0, None, None, 0.1) == 8.0
    assert rule.shares(6.0, [1.0, 2.0]) == [2.0, 4.0] and rule.shares(6.0, [6.0]) == [6.0]
    assert rule.most_hidden(1.0, 2.0) == 3.0


def test_send_waits_for_the_link_then_takes_p2p():
    assert rule.send(1.0, 2.0, 0.5) == (2.0, 2.5, 2.5)
    assert rule.send(3.0, 2.0, 0.5) == (3.0, 3.5, 3.5)


def test_every_shipped_zero_bubble_order_splits_each_backward_it_defers():
    for name in ("zb_h1", "zb_h2", "zb_v"):
        v = 1
        for steps in build_schedule(name, 4, 8, v):
            split = rule.split_pairs(steps)
            ws = sum(x[0] == "W" for x in steps)
            assert len(split) == ws > 0
