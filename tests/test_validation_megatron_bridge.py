"""Published Megatron-Bridge runs (validation/megatron_bridge/): out of sample, no constant
fitted on them. Before Megatron-FSDP was modelled, its Llama 3 70B runs were predicted
hundreds of GB over a GB200; they ran, so they must fit, and their step times must hold."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from simulator.api import resolve
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.validation.cases import load_cases
from simulator.validation.predict import predict_step_time

FOLDER = Path(__file__).resolve().parents[1] / "validation" / "megatron_bridge"


@pytest.fixture(scope="module")
def cases():
    return load_cases(FOLDER)


def _memory(case, **extra):
    w, t = resolve(case.spec["workload"], case.topology, {**case.spec["overrides"], **extra})
    return estimate_memory(w, Topology.from_config(t))


def test_each_run_states_its_recipe_and_fits(cases):
    assert len(cases) == 30
    assert sum(bool(c.spec["workload"]["training"].get("use_megatron_fsdp"))
               for c in cases) == 8
    for c in cases:
        assert c.recipe["source"] and isinstance(c.recipe["unknown"], list), c.id
        rep = _memory(c)
        assert rep.fits, f"{c.id}: {rep.explain()}"


def test_without_fsdp_the_70b_and_405b_runs_could_not_have_run(cases):
    for c in cases:
        if "fsdp" in c.id and ("70b" in c.id or "405b" in c.id):
            zero1 = _memory(c, **{"training.use_megatron_fsdp": False,
                                  "training.data_parallel_sharding_strategy": None})
            assert not zero1.fits and zero1.worst.total > 2 * zero1.capacity_bytes, c.id


def test_without_lora_the_70b_lora_runs_could_not_have_run(cases):
    """The 26.06 Llama 3 70B LoRA runs on 8 GPUs (validation/megatron_bridge/lora.yaml): as
    full fine-tuning their weights' gradients and optimizer states need more than a GPU holds
    (1.1-2.2x); with the
    base frozen they fit, and their step time is 4-9 % above the measured (attention is
    costed over the whole 4096-token pack), where full fine-tuning would be 38-46 % above."""
    lora = [c for c in cases if "-lora-" in c.id]
    assert len(lora) == 5
    for c in lora:
        full = _memory(c, **{"training.peft": "none"})
        assert not full.fits and full.worst.total > 1.1 * full.capacity_bytes, c.id
        err = predict_step_time(c) / c.measured - 1
        assert 0.0 < err <= 0.10, (c.id, err)


def test_step_times_within_the_bar(cases):
    # now: median 3.3 %, max 11.6 % (B200 with GB200's constants: its Llama 3 8B run is
    # 11.6 % faster than predicted; the 25.11 and 26.02.01 releases ran the FSDP 70B plan
    # 7-10 % faster than 25.09 and 26.02; GB200's 26.x Llama 3.1 405B FP8 runs got 6 % faster
    # from 26.02 to 26.04 while their MXFP8 twins did not); bar: every case within 12 %,
    # median within 5 %
    errors = {c.id: predict_step_time(c) / c.measured - 1 for c in cases}
    assert all(abs(e) <= 0.12 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05, errors
