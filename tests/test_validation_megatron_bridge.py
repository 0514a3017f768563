"""Published Megatron-Bridge runs (validation/megatron_bridge/): out of sample, no constant
fitted on them. Before Megatron-FSDP was modelled, its Llama 3 70B runs were predicted
hundreds of GB over a GB200; they ran, so they must fit, and their step times must hold."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from known_gaps import KNOWN_GAPS

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
    assert len(cases) == 44
    assert sum(bool(c.spec["workload"]["training"].get("use_megatron_fsdp"))
               for c in cases) == 8
    for c in cases:
        assert c.recipe["source"] and isinstance(c.recipe["unknown"], list), c.id
        rep = _memory(c)
        assert rep.fits, f"{c.id}: {rep.explain()}"


def test_without_fsdp_the_70b_and_405b_runs_could_not_have_run(cases):
    """Under ZeRO-1 (no FSDP) each of these runs needs nearly twice its GPU or more (the 70B
    FP8 run on GB200 1.98x: per-tensor FP8 keeps no weight transposes on Blackwell)."""
    for c in cases:
        if "fsdp" in c.id and ("70b" in c.id or "405b" in c.id):
            zero1 = _memory(c, **{"training.use_megatron_fsdp": False,
                                  "training.data_parallel_sharding_strategy": None})
            assert not zero1.fits and zero1.worst.total > 1.9 * zero1.capacity_bytes, c.id


def test_without_lora_the_70b_lora_runs_could_not_have_run(cases):
    """The 26.06 Llama 3 70B LoRA runs on 8 GPUs (validation/megatron_bridge/lora.yaml): as
    full fine-tuning their weights' gradients and optimizer states need more than a GPU holds
    (1.1-2.2x), or all of it (the GB300 tensorwise run, 0.99x: per-tensor FP8 keeps no weight
    transposes on Blackwell, so full fine-tuning would leave under 1 % of the GPU free); with
    the base frozen they fit, and their step time is within 5 % of the measured (-2.3 ..
    +4.1 %), where full fine-tuning would be 38-46 % above."""
    lora = [c for c in cases if "-lora-" in c.id]
    assert len(lora) == 5
    for c in lora:
        full = _memory(c, **{"training.peft": "none"})
        if c.id == "mbridge2606-llama3-70b-lora-gb300-8g-fp8":
            assert full.worst.total > 0.98 * full.capacity_bytes, c.id
        else:
            assert not full.fits and full.worst.total > 1.1 * full.capacity_bytes, c.id
        err = predict_step_time(c) / c.measured - 1
        assert abs(err) <= 0.05, (c.id, err)


def _with(case, **over):
    return replace(case, spec={**case.spec, "overrides": {**case.spec["overrides"], **over}})


def test_packed_fine_tuning_runs_cost_attention_per_question(cases):
    """The LoRA and SFT runs pack SQuAD questions into 4096-token sequences and attend within
    each (THD, cu_seqlens). Costing the whole 4096-token square instead puts every LoRA run
    4-9 % above its measured step (the error before packing was modelled); the length assumed
    for the questions (230 tokens) matters little: 150 or 400 moves no run by 1 %."""
    tuned = [c for c in cases if "-lora-" in c.id or "-sft-" in c.id]
    assert len(tuned) == 10
    for c in tuned:
        assert c.spec["workload"]["training"]["packed_document_length"] == 230, c.id
        packed = predict_step_time(c)
        whole = predict_step_time(_with(c, **{"training.packed_document_length": None}))
        assert 1.04 < whole / packed < 1.12, c.id
        for doc in (150.0, 400.0):
            other = predict_step_time(_with(c, **{"training.packed_document_length": doc}))
            assert abs(other / packed - 1) < 0.01, (c.id, doc)


def test_the_70b_sft_runs_fit_and_hold(cases):
    """The 26.06 Llama 3 70B SFT runs on 32 GPUs (validation/megatron_bridge/sft.yaml), full
    fine-tuning: they fit, and but for GB300's MXFP8 row (below) each is within 10 %."""
    sft = {c.id: c for c in cases if "-sft-" in c.id}
    assert len(sft) == 5
    for cid, c in sft.items():
        if cid in KNOWN_GAPS:
            continue
        err = predict_step_time(c) / c.measured - 1
        assert abs(err) <= 0.10, (cid, err)


@pytest.mark.xfail(strict=True, reason="MXFP8 full training measured 7-12 % slower than FP8 "
                   "on GB200 / GB300 (SFT and Llama 3.1 405B pre-training) but not under "
                   "LoRA; the model costs the two recipes alike (validation/analysis.md)")
def test_sft_mxfp8_costs_what_it_measured(cases):
    by_id = {c.id: c for c in cases}
    for gpu in ("gb300", "gb200"):
        fp8 = by_id[f"mbridge2606-llama3-70b-sft-{gpu}-32g-fp8"]
        mx = by_id[f"mbridge2606-llama3-70b-sft-{gpu}-32g-mxfp8"]
        measured = mx.measured / fp8.measured  # 1.118 on GB300, 1.075 on GB200
        predicted = predict_step_time(mx) / predict_step_time(fp8)
        assert predicted == pytest.approx(measured, rel=0.03), gpu


def test_step_times_within_the_bar(cases):
    # now: median 2.8 %, max 9.8 % but for the known gap (the 25.11 and 26.02.01 releases ran
    # the FSDP 70B plan 7-10 % faster than 25.09 and 26.02; GB200's 26.x Llama 3.1 405B FP8
    # runs got 6 % faster from 26.02 to 26.04 while their MXFP8 twins did not; the GB200 SFT
    # FP8 run is 8.2 % slower than predicted; the 26.10 64-GPU 405B MXFP8 run at TP 8 is 9.8 %
    # faster); bar: every case within 12 %, median within 5 %
    errors = {c.id: predict_step_time(c) / c.measured - 1 for c in cases}
    assert all(abs(e) <= 0.12 for k, e in errors.items() if k not in KNOWN_GAPS), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05, errors


def test_the_64_gpu_405b_mxfp8_run_peak_memory(cases):
    """The 26.10 recipe docstring (validation/megatron_bridge/gb200.yaml, TP 8 x PP 8 on 64
    GB200) gives "154.6 GiB peak allocated memory" without the rank, and Megatron-Bridge logs
    every rank's allocator peak in decimal GB: so the figure may be the fullest stage or the
    last, in GiB or GB. The predicted allocator peak (stage total less the framework
    allowance, as validation/memory.yaml compares) is within 10 % of it under every reading:
    today +0.2 / -9.5 % (GiB) and +7.6 / -2.9 % (GB), fullest / last stage."""
    c = next(c for c in cases if c.id == "mbridge2610-llama31-405b-gb200-64g-mxfp8-tp8")
    rep = _memory(c)
    peaks = [s.total - s.framework for s in rep.stages]
    fullest, last = max(peaks), peaks[-1]
    for measured in (154.6 * 2**30, 154.6e9):
        for predicted in (fullest, last):
            assert abs(predicted / measured - 1) <= 0.10, (predicted / 2**30, measured)


NVFP4_70B = [f"mbridge{r}-llama3-70b-gb200-64g-nvfp4" for r in ("2602", "260201", "2604", "260401")]
NVFP4_405B = [f"mbridge{r}-llama31-405b-gb200-256g-nvfp4"
              for r in ("2602", "2604", "260401", "2606")]


def test_the_gb200_nvfp4_runs_disagree_by_plan(cases):
    """GB200's NVFP4 rows (never fitted: gb200-nvl72 carries its FP8 efficiency for NVFP4). The
    405B TP 4 PP 16 rows within 6 % (today -3.4 .. +5.2 %); the 70B TP 2 PP 4 rows fast, inside
    their known range (-16.1 / -14.2 / -7.8 / -7.7 %): no one NVFP4 efficiency fits both."""
    by_id = {c.id: c for c in cases}
    for cid in NVFP4_405B:
        assert abs(predict_step_time(by_id[cid]) / by_id[cid].measured - 1) <= 0.06, cid
    for cid in NVFP4_70B:
        assert -0.18 <= predict_step_time(by_id[cid]) / by_id[cid].measured - 1 <= -0.05, cid


@pytest.mark.xfail(strict=True, reason="GB200 NVFP4, Llama 3 70B TP 2 PP 4 (26.02 / 26.02.01): "
                   "-16.1 / -14.2 %; the 405B rows of the same tables want a lower NVFP4 "
                   "efficiency, these a higher one (topologies/gb200-nvl72.yaml)")
def test_the_gb200_nvfp4_70b_runs_within_the_bar(cases):
    by_id = {c.id: c for c in cases}
    for cid in NVFP4_70B:
        assert abs(predict_step_time(by_id[cid]) / by_id[cid].measured - 1) <= 0.12, cid
