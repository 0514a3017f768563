"""The architecture doc's worked example: a schedule with its own memory profile is one
class; the plan, the engine and memory follow it with no edit outside ``schedules/``.

The class below is the doc's ``GroupedGPipe`` (docs/architecture.md, "A schedule is one
file"), registered from this test instead of a file in ``simulator/schedules/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from simulator import simulate
from simulator.api import resolve
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.precision import PRECISIONS
from simulator.schedules import SCHEDULES
from simulator.schedules.base import Schedule, Step


class GroupedGPipe(Schedule):
    name = "gpipe_grouped"
    source = "illustration: GPipe (Huang et al. 2019) flushed every p micro-batches"

    def steps(self, p, m, v):
        order = []
        for start in range(0, m, p):
            group = range(start, min(start + p, m))
            order += [Step("F", i, 0) for i in group] + [Step("B", i, 0) for i in group]
        return [list(order) for _ in range(p)]

    def in_flight(self, p, m, v, stage):
        return float(min(p, m))

    def outputs_held(self, p, m, v):
        return min(p, m)  # the last stage keeps a group's logits until their backwards


OVER = {"training.global_batch_size": 16, "training.micro_batch_size": 1}


def _memory(schedule: str):
    w, t = resolve("tiny", "dgx-h100", {**OVER, "parallelism.pipeline_schedule": schedule})
    return estimate_memory(w, Topology.from_config(t))


def test_memory_follows_the_new_schedules_own_profile(monkeypatch):
    monkeypatch.setitem(SCHEDULES, GroupedGPipe.name, GroupedGPipe())
    grouped, one, gpipe = (_memory(s) for s in ("gpipe_grouped", "1f1b", "gpipe"))
    last = -1  # the last stage holds the outputs
    acts = [r.stages[last].activations for r in (one, grouped, gpipe)]
    assert acts[0] < acts[1] < acts[2]  # p = 2 of m = 16 in flight: between 1F1B and GPipe
    # stage 0 holds min(p - 0, m) = 2 under 1F1B as under the grouped schedule
    assert grouped.stages[0].activations == pytest.approx(one.stages[0].activations)
    r = simulate("tiny", "dgx-h100", overrides={**OVER,
                                                "parallelism.pipeline_schedule": "gpipe_grouped"})
    assert r.step_time_s > simulate("tiny", "dgx-h100", overrides=OVER).step_time_s


ROOT = Path(__file__).resolve().parents[1] / "simulator"
NAMED = set(SCHEDULES) | set(PRECISIONS)


def test_no_layer_below_the_schedules_and_precision_names_one():
    """Memory, the shape, the plan, the engine and the metrics ask a schedule or a
    precision by method or field, never compare its name to a string."""
    found = []
    for pkg in ("shape", "memory", "workload", "engine", "metrics"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    for side in [node.left, *node.comparators]:
                        if isinstance(side, ast.Constant) and side.value in NAMED:
                            found.append(f"{path.name}:{node.lineno} {side.value!r}")
    assert found == []
