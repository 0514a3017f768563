"""The search's cheap plan (``build_plan(bound_only=True)``) prices phases as the full one."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import resolve
from simulator.hardware import Topology
from simulator.sweep.search_tasks import step_lower_bound
from simulator.workload.plan import build_plan


@pytest.mark.parametrize("workload,overrides", [
    ("llama3-8b", {}),
    ("llama3-70b", {"parallelism.pipeline_schedule": "interleaved",
                    "parallelism.virtual_pipeline": 5}),
    ("mixtral-8x7b", {}),
])
def test_bound_only_plan_has_the_same_phase_times_and_bound(workload, overrides):
    w, t = resolve(workload, "dgx-h100", overrides)
    topo = Topology.from_config(t)
    full, cheap = build_plan(w, topo), build_plan(w, topo, bound_only=True)
    a, b = full.engine_input, cheap.engine_input
    for name in ("fwd", "bwd", "fwd_ep", "bwd_ep", "optimizer", "p2p"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert step_lower_bound(a) == step_lower_bound(b)
    assert all(not ph.ops for ph in cheap.phases.values())
    assert any(ph.ops for ph in full.phases.values())
    assert all(chunk == [] for row in b.dp_buckets for chunk in row)
