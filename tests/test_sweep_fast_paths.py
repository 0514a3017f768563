"""The shortcuts a sweep takes give the answers of the plain computations, exactly.

A sweep resolves each topology once, keys configurations from cached canonical
texts, shares one :class:`~simulator.hardware.Topology` (and its remembered
placements, collective times and layer costs) between plans, costs alike pipeline
chunks once and copies results without ``dataclasses.asdict``. Each is checked here against
the computation it replaces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle

import pytest

from simulator import __version__
from simulator.api import resolve, simulate_resolved
from simulator.collectives import collective_time
from simulator.collectives.cost import _collective_time
from simulator.config import load_topology
from simulator.hardware import Topology, _from_config
from simulator.sweep.resolve import Documents, config_key, flat, resolve_point
from simulator.sweep.spec import Point
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.cost import _cost_ops, cost_ops
from simulator.workload.ops import backward_of, layer_forward
from simulator.workload.plan import build_plan

PLANS = [
    ("llama3-70b", {"parallelism.tensor": 4, "parallelism.pipeline": 8,
                    "parallelism.pipeline_schedule": "interleaved",
                    "parallelism.virtual_pipeline": 5, "parallelism.data": 32,
                    "training.global_batch_size": 1024}),
    ("tiny", {"training.recompute_granularity": "full", "training.recompute_method": "block",
              "training.recompute_num_layers": 1}),
    ("mixtral-8x7b", {}),
]


def _old_key(w, t) -> str:
    doc = {"simulator": __version__, "workload": w.model_dump(mode="json"),
           "topology": t.model_dump(mode="json")}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("name,overrides", PLANS, ids=[p[0] for p in PLANS])
def test_config_key_is_the_hash_of_the_whole_canonical_document(name, overrides):
    w, t = resolve(name, "dgx-h100", overrides)
    assert config_key(w, t) == _old_key(w, t)


def _plain_resolve(point: Point, docs: Documents):
    """The point resolved without the per-sweep topology cache, as a fresh load."""
    w, t = resolve(point.workload, point.topology, point.overrides, point.topology_overrides)
    return w, t, {**flat(w.model_dump()), **flat(t.model_dump(), "topology.")}


def test_points_sharing_a_topology_resolve_as_if_alone():
    docs = Documents()
    points = [Point(i, "tiny", "dgx-h100", overrides={"parallelism.tensor": tp},
                    topology_overrides={"tiers.1.bandwidth_GBps": bw})
              for i, (tp, bw) in enumerate([(1, 25), (2, 25), (2, 50), (1, 25)])]
    resolved = [resolve_point(p, docs) for p in points]
    assert resolved[0].topology is resolved[1].topology is resolved[3].topology
    assert resolved[2].topology is not resolved[0].topology
    for p, r in zip(points, resolved, strict=True):
        w, t, inputs = _plain_resolve(p, docs)
        assert (r.workload, r.topology, r.inputs) == (w, t, inputs)
        assert r.key == _old_key(w, t)


def test_invalid_points_keep_the_inputs_read_before_the_failure():
    docs = Documents()
    bad_topology = resolve_point(Point(0, "tiny", "dgx-h100",
                                       topology_overrides={"tiers.1.bandwidth_GBps": -1}), docs)
    assert not bad_topology.valid and "bandwidth_GBps" in bad_topology.reason
    assert bad_topology.inputs["topology.tiers.1.bandwidth_GBps"] == -1
    assert not any(k.startswith("model.") for k in bad_topology.inputs)
    bad_workload = resolve_point(Point(1, "tiny", "dgx-h100",
                                       overrides={"parallelism.tensor": 0}), docs)
    assert not bad_workload.valid and bad_workload.inputs["parallelism.tensor"] == 0
    assert bad_workload.inputs["topology.name"] == "dgx-h100"
    gpus = resolve_point(Point(2, "tiny", "dgx-h100", num_gpus=7), docs)
    assert "num_gpus = 7" in gpus.reason and gpus.inputs["parallelism.tensor"] >= 1


def test_topology_is_shared_per_config_value_and_replace_starts_afresh():
    t = load_topology("dgx-h100")
    topo = Topology.from_config(t)
    assert Topology.from_config(t) is topo
    assert Topology.from_config(pickle.loads(pickle.dumps(t))) is topo  # a worker's copy
    other = load_topology("dgx-h100", {"tiers.1.bandwidth_GBps": 25})
    assert Topology.from_config(other) is not topo
    assert Topology.from_config(other) == _from_config(other)
    fresh = dataclasses.replace(topo, tiers=topo.tiers[:2])
    assert fresh.place(16, 1) != topo.place(16, 1)  # a memo of its own, not topo's


def test_remembered_collective_times_are_the_computed_ones():
    topo = Topology.from_config(load_topology("dgx-h100"))
    for size, stride in [(8, 1), (64, 8), (16, 4), (1024, 1)]:
        place = topo.place(size, stride)
        assert place == topo._place(size, stride)
        for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"):
            for nbytes in (1e3, 2.5e7, 4e9):
                first = collective_time(op, nbytes, place, topo)
                assert first == collective_time(op, nbytes, place, topo)
                assert first == _collective_time(op, nbytes, place, topo, None)


@pytest.mark.parametrize("name,overrides", PLANS, ids=[p[0] for p in PLANS])
def test_alike_chunks_costed_once_give_the_same_plan(name, overrides, monkeypatch):
    w, t = resolve(name, "dgx-h100", overrides)
    plan = build_plan(w, Topology.from_config(t))
    monkeypatch.setattr(ChunkCoster, "chunk_kind", lambda self, s, c: None)  # cost every chunk
    plain = build_plan(w, _from_config(t))  # and a fresh memo
    assert plan.totals == plain.totals and plan.phases.keys() == plain.phases.keys()
    for key, ph in plan.phases.items():
        assert (ph.duration, ph.compute, ph.exposed, ph.ops) == \
            (plain.phases[key].duration, plain.phases[key].compute, plain.phases[key].exposed,
             plain.phases[key].ops)
    for table in ("fwd", "bwd", "wgrad", "fwd_ep", "bwd_ep"):
        a, b = getattr(plan.engine_input, table), getattr(plain.engine_input, table)
        assert (a is None and b is None) or (a == b).all()


@pytest.mark.parametrize("name,overrides", PLANS, ids=[p[0] for p in PLANS])
def test_result_dict_is_asdicts(name, overrides):
    w, t = resolve(name, "dgx-h100", overrides)
    result = simulate_resolved(w, t)[0]
    assert result.to_dict() == dataclasses.asdict(result)


def test_remembered_layer_costs_are_the_computed_ones_and_private_copies():
    w, t = resolve("llama3-70b", "dgx-h100", PLANS[0][1])
    topo = Topology.from_config(t)
    ctx = ChunkCoster(w, topo).ctx
    fwd = layer_forward(w)
    for ops in (fwd, backward_of(fwd)):
        first, plain = cost_ops(ops, ctx), _cost_ops(ops, ctx)
        assert dataclasses.asdict(first) == dataclasses.asdict(plain)
        first.duration, first.exposed["tp"] = -1.0, -1.0  # a caller's copy: its own
        again = cost_ops(ops, ctx)
        assert dataclasses.asdict(again) == dataclasses.asdict(plain)


def test_a_pickled_topology_is_equal_and_carries_no_memo():
    topo = Topology.from_config(load_topology("dgx-h100"))
    topo.place(64, 8)
    copy = pickle.loads(pickle.dumps(topo))
    assert copy == topo and copy._memo == {} and copy.place(64, 8) == topo.place(64, 8)
