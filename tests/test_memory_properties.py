"""Property tests of the memory model (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import load_topology, load_workload
from simulator.hardware import Topology
from simulator.memory import activation_bytes_per_layer, estimate_memory

TOPO = Topology.from_config(load_topology("dgx-h100"))

plans = st.fixed_dictionaries({
    "tensor": st.sampled_from([1, 2, 4, 8]),
    "pipeline": st.sampled_from([1, 2, 4]),
    "context": st.sampled_from([1, 2]),
    "sequence_parallel": st.booleans(),
    "schedule": st.sampled_from(["1f1b", "gpipe"]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "flash": st.booleans(),
    "gated": st.booleans(),
    "groups": st.sampled_from([2, 4, 16]),
    "mbs": st.sampled_from([1, 2, 4]),
})


def workload(plan: dict, data: int, mbs: int, microbatches: int):
    doc = {"model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
                     "num_query_groups": plan["groups"], "gated_linear_unit": plan["gated"],
                     "vocab_size": 32000, "seq_length": 2048},
           "parallelism": {"tensor": plan["tensor"], "pipeline": plan["pipeline"],
                           "data": data, "context": plan["context"],
                           "sequence_parallel": plan["sequence_parallel"],
                           "pipeline_schedule": plan["schedule"]},
           "training": {"global_batch_size": mbs * data * microbatches,
                        "micro_batch_size": mbs, "recompute": plan["recompute"],
                        "use_flash_attn": plan["flash"]}}
    return load_workload(doc)


@settings(max_examples=60, deadline=None)
@given(plan=plans, dp=st.integers(1, 16), extra=st.integers(1, 16), m=st.integers(1, 8))
def test_more_data_parallel_never_raises_optimizer_memory(plan, dp, extra, m):
    small = estimate_memory(workload(plan, dp, plan["mbs"], m), TOPO)
    big = estimate_memory(workload(plan, dp + extra, plan["mbs"], m), TOPO)
    for a, b in zip(small.stages, big.stages, strict=True):
        assert b.optimizer <= a.optimizer * (1 + 1e-12)
        assert b.parameters == a.parameters and b.gradients == a.gradients


@settings(max_examples=60, deadline=None)
@given(plan=plans, dp=st.integers(1, 4), m=st.integers(1, 8))
def test_doubling_micro_batch_doubles_activations(plan, dp, m):
    one = workload(plan, dp, plan["mbs"], m)
    two = workload(plan, dp, 2 * plan["mbs"], m)  # same number of micro-batches
    assert activation_bytes_per_layer(two) == 2 * activation_bytes_per_layer(one)
    r1, r2 = estimate_memory(one, TOPO), estimate_memory(two, TOPO)
    for a, b in zip(r1.stages, r2.stages, strict=True):
        assert abs(b.activations - 2 * a.activations) <= 1e-9 * b.activations
