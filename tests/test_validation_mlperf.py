"""MLPerf Training submission logs (validation/mlperf/): out of sample, no constant fitted on
them. NVIDIA's v4.0 GPT-3 175B runs on 512 and 10,752 / 11,616 DGX H100, its v4.0 Llama 2 70B
LoRA runs on one DGX H100, one HGX H200 and 64 / 1,024 H100, and the v5.0 Llama 3.1 405B runs
(NVIDIA on 512 to 8,192 H100 and 256 / 512 GB200, Nebius on 512 / 1,024 H200, IBM + CoreWeave +
NVIDIA on 512 to 2,496 GB200), their step times read from the logs and their plans from the
submission's config files."""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.api import resolve
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.validation.cases import load_cases
from simulator.validation.predict import predict_step_time

FOLDER = Path(__file__).resolve().parents[1] / "validation" / "mlperf"


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in load_cases(FOLDER)}


def _with(case, **over):
    return replace(case, spec={**case.spec, "overrides": {**case.spec["overrides"], **over}})


ONE_NODE_LORA = "mlperf40-llama2-70b-lora-h100-8g"
CP2_LORA = ("mlperf40-llama2-70b-lora-h100-64g", "mlperf40-llama2-70b-lora-h100-1024g")
CP8_LORA = tuple(f"mlperf50-llama2-70b-lora-gb200-{n}g" for n in (72, 144, 512))
# Llama 3.1 8B runs (v5.1, v6.0) outside the 12 % bar, each held inside its known range here
SMALL_STEP_MISSES = {"mlperf51-llama31-8b-gb200-512g": (0.12, 0.20),
                     # the v6.0 run of the benchmark on 1,024 GB200 (TP 4 CP 4): 0.073 s
                     "mlperf60-llama31-8b-gb200-1024g": (0.25, 0.40),
                     "mlperf51-llama31-8b-gb300-512g": (0.08, 0.16),
                     "mlperf51-llama31-8b-h100-cisco-64g": (-0.17, -0.10),
                     "mlperf51-llama31-8b-h100-cisco-128g": (-0.36, -0.27),
                     # GPT-3 175B at MBS 2 on Eos (v4.1, NeMo 24.09): the recipe's compute is
                     # faster than the fitted FP8 efficiency prices it
                     "mlperf41-gpt3-175b-h100-256g": (0.10, 0.18),
                     "mlperf41-gpt3-175b-h100-512g": (0.09, 0.17),
                     # Nebius's 2-node NVFP4 8B run on B200 (dgx-b200's FP4 efficiency is its
                     # FP8 value carried; every B200 NVFP4 run comes out fast)
                     "mlperf51-llama31-8b-nvfp4-b200-nebius-16g": (-0.16, -0.09),
                     # HGX B300 (uncalibrated: dgx-b300 carries gb300-nvl72's NVFP4
                     # efficiency), NVFP4 on one node: its gain over B200 measured 1.13x
                     "mlperf51-llama31-8b-nvfp4-b300-lenovo-8g": (-0.18, -0.10),
                     "mlperf51-llama31-8b-nvfp4-b300-nebius-8g": (-0.16, -0.08)}
# DeepSeek-V3 671B (v6.0) on GB200, TP 2: too fast, the more so the fewer micro-batches a step
DSV3 = "mlperf60-deepseek-v3-"
DSV3_GB200 = {f"{DSV3}gb200-{n}g": r for n, r in
              ((512, (-0.22, -0.14)), (2048, (-0.26, -0.17)), (4096, (-0.34, -0.25)),
               (8192, (-0.48, -0.38)))}
RANGED_MISSES = {**SMALL_STEP_MISSES, **DSV3_GB200}


def _memory(c):
    w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"])
    return estimate_memory(w, Topology.from_config(t))


def test_each_run_states_its_recipe_and_fits(cases):
    assert len(cases) == 78
    for c in cases.values():
        assert any(f"training_results_v{r}" in c.source
                   for r in ("4.0", "4.1", "5.0", "5.1", "6.0")), c.id
        assert c.recipe["source"] and c.recipe["unknown"], c.id
        rep = _memory(c)
        assert rep.fits, f"{c.id}: {rep.explain()}"


def test_the_one_node_h100_lora_run_fits_because_its_weight_transposes_are_not_cached(cases):
    """The v4.0 LoRA recipe keeps FP8 weights with disable_parameter_transpose_cache: TE makes
    each weight's transpose in its backward and caches none (memory/states.py). Predicted
    69.2 GB on the 85.5 GB (81,559 MiB) H100; with the transposes cached, 86.4 GB, over."""
    c = cases[ONE_NODE_LORA]
    assert c.spec["workload"]["training"]["disable_parameter_transpose_cache"]
    rep = _memory(c)
    cached = _memory(_with(c, **{"training.disable_parameter_transpose_cache": False}))
    assert rep.fits and rep.worst.fp8_weight_copies == 0.0
    assert not cached.fits and cached.worst.total > 1.0 * cached.capacity_bytes


def test_step_times_within_the_bar(cases):
    # now: GPT-3 +10.7 % (512 GPUs), -0.5 / -0.4 % (10,752 / 11,616); LoRA +7.6 % (one H100
    # node), +4.4 % (one H200 node); Llama 3.1 405B +5.5 / +4.6 / +3.5 / +3.8 / -0.5 % (512 to
    # 8,192 H100), +6.7 / +6.6 % (H200), -0.4 .. -1.6 % (GB200); Llama 3.1 8B (v5.1) -4.3 ..
    # +9.6 % but four; bar: 12 % each, as the other never-fitted sets
    # (tests/test_validation_megatron_bridge.py). The known misses are held inside their ranges.
    for cid, c in cases.items():
        err = predict_step_time(c) / c.measured - 1
        if cid in CP2_LORA:
            assert -0.15 <= err <= -0.09, (cid, err)
        elif cid in CP8_LORA:
            assert 0.15 <= err <= 0.25, (cid, err)
        elif cid in RANGED_MISSES:
            lo, hi = RANGED_MISSES[cid]
            assert lo <= err <= hi, (cid, err)
        else:
            assert abs(err) <= 0.12, (cid, err)


def _assert_within_the_bar(cases, ids, bar=0.12):
    """Every run of ``ids`` predicted within ``bar`` of its measured step (the strict xfails
    below: a known miss that a fix turns into an XPASS)."""
    for cid in ids:
        err = predict_step_time(cases[cid]) / cases[cid].measured - 1
        assert abs(err) <= bar, (cid, err)


@pytest.mark.xfail(strict=True, reason="context parallelism 2 with FP8 attention under LoRA: "
                   "the 64- and 1,024-GPU runs take 37 / 45 % more GPU-seconds per sample than "
                   "the one-node CP 1 run, the model 12 / 19 %; predicted -12.6 / -12.1 %, "
                   "cause not identified (validation/mlperf/README.md)")
def test_the_cp2_lora_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, CP2_LORA)


@pytest.mark.xfail(strict=True, reason="Ulysses (a2a) context parallelism 8 under LoRA on GB200: "
                   "measured, a sample costs 29 % more GPU-seconds than on the 8-GPU DP run; the "
                   "model gives 55 % (smaller GEMMs of 1,024-token shards, the all-to-alls and a "
                   "per-step wait), so +19 %; cause not identified (validation/mlperf/README.md)")
def test_the_cp8_lora_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, CP8_LORA)


def test_the_blackwell_lora_runs_fit_without_weight_transposes(cases):
    """The 8-GPU LoRA runs on B200 and GB200 hold the whole 70B model in FP8 on every GPU with
    the transpose cache on (disable_parameter_transpose_cache False). They ran (allocator peak
    168.8 in the logs): Blackwell's FP8 GEMMs take any layout, so per-tensor FP8 keeps no
    transposes (gpu.fp8_any_layout; memory/states.py). With Hopper's TN-only rule the model
    would put them 69 GB higher and over their devices."""
    for cid in ("mlperf50-llama2-70b-lora-b200-8g", "mlperf50-llama2-70b-lora-gb200-8g"):
        c = cases[cid]
        rep = _memory(c)
        assert rep.fits and rep.worst.fp8_weight_copies == 0.0, cid
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"],
                       {"gpu.fp8_any_layout": False})
        hopper_rule = estimate_memory(w, Topology.from_config(t))
        assert not hopper_rule.fits, cid
        assert hopper_rule.worst.total - rep.worst.total == pytest.approx(69e9, rel=0.01)
        assert abs(predict_step_time(c) / c.measured - 1) <= 0.05, cid


def test_the_first_h200_training_step(cases):
    """The H200 LoRA run is the first multi-GPU H200 training step under validation/: h200's
    constants are dgx-h100's (topologies/h200.yaml); predicted +4.4 %."""
    c = cases["mlperf40-llama2-70b-lora-h200-8g"]
    assert c.topology == "h200"
    assert abs(predict_step_time(c) / c.measured - 1) <= 0.06


def test_the_two_largest_runs_scale_as_measured(cases):
    a, b = cases["mlperf40-gpt3-175b-h100-10752g"], cases["mlperf40-gpt3-175b-h100-11616g"]
    measured = b.measured / a.measured  # 1.0011: the same per-GPU work at DP 448 and 484
    predicted = predict_step_time(b) / predict_step_time(a)
    assert predicted == pytest.approx(measured, abs=0.01)


def test_the_recipes_amax_setting_is_what_the_large_runs_need(cases):
    """NVTE_DP_AMAX_REDUCE_INTERVAL=0 keeps the FP8 amax reduction inside the TP group. Priced
    with Megatron-Core's default instead (a data-parallel barrier at each of the 96 chunk
    phases of a step), the 10K-GPU runs come out more than 5 % slow (today +7.2 / +7.4 %)."""
    for cid in ("mlperf40-gpt3-175b-h100-10752g", "mlperf40-gpt3-175b-h100-11616g"):
        c = cases[cid]
        as_run = predict_step_time(c) / c.measured - 1
        default = predict_step_time(_with(c, **{"training.tp_only_amax_red": False}))
        default = default / c.measured - 1
        assert abs(as_run) <= 0.03 and default > 0.05, (cid, as_run, default)


LLAMA405 = ("512g", "2048g", "2432g", "2560g", "8192g")
CARINA = ("512g", "1024g", "1536g", "2048g", "2496g")


def _per_sample(c, step_s):
    """GPU-seconds per sample: GPUs x step / GBS."""
    ov, w = c.spec["overrides"], c.spec["workload"]
    par = w["parallelism"]
    gpus = (par["tensor"] * par["pipeline"] * par.get("context", 1)
            * ov.get("parallelism.data", par["data"]))
    return gpus * step_s / ov.get("training.global_batch_size", w["training"]["global_batch_size"])


def _weak_scaling(runs):
    """(measured, predicted) cost per sample of each run relative to the first."""
    m = [_per_sample(c, c.measured) for c in runs]
    p = [_per_sample(c, predict_step_time(c)) for c in runs]
    return [x / m[0] for x in m], [x / p[0] for x in p]


def test_the_405b_runs_scale_as_measured(cases):
    """Weak scaling of the v5.0 Llama 3.1 405B H100 runs, GPU-seconds per sample relative to the
    512-GPU run. Measured 1.033 / 1.048 / 1.049 / 1.143 at 2,048 / 2,432 / 2,560 / 8,192 GPUs;
    the model gives 1.024 / 1.027 / 1.031 / 1.077: the same order, and at 8,192 GPUs about half
    the loss (validation/mlperf/README.md)."""
    m, p = _weak_scaling([cases[f"mlperf50-llama31-405b-h100-{n}"] for n in LLAMA405])
    assert all(b >= a for a, b in itertools.pairwise(p)), p  # more GPUs never cheaper per sample
    for cid, mi, pi in zip(LLAMA405, m, p, strict=True):
        assert abs(pi - mi) <= 0.07, (cid, mi, pi)


def test_the_gb200_405b_runs(cases):
    """GB200 NVL72, 256 to 2,496 GPUs, the plan of the dgxc GB200 training group (whose fit
    gb200-nvl72's efficiencies are held off, docs/calibration-log.md: at that fit these runs
    would be +10 %): each within 3 % (today -0.4 .. -1.6 %), and Carina's cost per sample from
    512 to 2,496 GPUs (measured 1.023 / 1.030 / 1.041 / 1.057) within 1.5 points."""
    gb200 = [c for c in cases.values() if c.id.startswith("mlperf50-llama31-405b-gb200")]
    assert len(gb200) == 7
    for c in gb200:
        assert abs(predict_step_time(c) / c.measured - 1) <= 0.03, c.id
    m, p = _weak_scaling([cases[f"mlperf50-llama31-405b-gb200-carina-{n}"] for n in CARINA])
    for cid, mi, pi in zip(CARINA, m, p, strict=True):
        assert abs(pi - mi) <= 0.015, (cid, mi, pi)


def test_the_multi_node_h200_runs(cases):
    """Nebius's 512 / 1,024 H200 runs, the first multi-node H200 steps here (h200.yaml carries
    dgx-h100's constants): +6.7 / +6.6 %, and halving the micro-batches a replica by doubling DP
    costs what it measured (0.507 of the step)."""
    a, b = cases["mlperf50-llama31-405b-h200-512g"], cases["mlperf50-llama31-405b-h200-1024g"]
    for c in (a, b):
        assert abs(predict_step_time(c) / c.measured - 1) <= 0.08, c.id
    assert predict_step_time(b) / predict_step_time(a) == pytest.approx(b.measured / a.measured,
                                                                        abs=0.01)


LLAMA8B = "mlperf51-llama31-8b-"


def test_the_8b_fp8_runs(cases):
    """Llama 3.1 8B in FP8 (v5.1), steps of 0.09-0.74 s on GB200, GB300, B200, H200 and H100:
    the median miss within 6 % (today 4.0 % over 18), and the recipe's DDP bucket size is what the
    B200 runs need: with Megatron-Core's default buckets (max(40e6, 1e6 x dp) parameters,
    200 of them at DP 32) the 64-GPU runs come out 17-20 % slow, with the logged 768e6 /
    134e6 within 2 %."""
    runs = {cid: c for cid, c in cases.items()
            if cid.startswith(LLAMA8B) and not cid.startswith(NVFP4_8B)
            and cases[cid].topology != "dgx-b300"}
    assert len(runs) == 18
    errs = {cid: predict_step_time(c) / c.measured - 1 for cid, c in runs.items()}
    assert statistics.median(abs(e) for e in errs.values()) <= 0.06, errs
    for cid in ("mlperf51-llama31-8b-b200-oracle-64g", "mlperf51-llama31-8b-b200-verda-64g",
                "mlperf51-llama31-8b-b200-uf-64g"):
        default = _with(runs[cid], **{"training.ddp_bucket_size": None})
        assert abs(errs[cid]) <= 0.02 and predict_step_time(default) / runs[cid].measured > 1.15


SHORTEST_8B = [f"{LLAMA8B}{gpu}-512g" for gpu in ("gb200", "gb300")] + [
    "mlperf60-llama31-8b-gb200-1024g"]


@pytest.mark.xfail(strict=True, reason="the shortest steps: TP 2 CP 4 on 512 GB200 / GB300 "
                   "(v5.1), 0.09 s, and TP 4 CP 4 on 1,024 GB200 (v6.0), 0.073 s: predicted +16 / "
                   "+12 / +33 %; most of the excess is the per-step host wait (topology "
                   "reliability.host_noise_s, fitted on steps of seconds): without it they come "
                   "out 41-47 % fast (validation/mlperf/README.md)")
def test_the_shortest_8b_steps_within_the_bar(cases):
    _assert_within_the_bar(cases, SHORTEST_8B)


def test_the_shortest_8b_steps_are_mostly_the_host_wait(cases):
    """The three GB200 / GB300 8B runs of 0.07-0.09 s: the one-step model without the per-step
    host wait is 41-47 % fast, with it 12-33 % slow, so the measured overhead lies between
    none and the fitted 9.5 ms per tray and step (the slowest of 128 / 256 trays:
    9.5 ms x H_J = 52 / 58 ms a step; the runs leave 36-39 ms)."""
    for cid in SHORTEST_8B:
        c = cases[cid]
        quiet = predict_step_time(c, {"reliability.host_noise_s": 0.0})
        assert -0.48 <= quiet / c.measured - 1 <= -0.40, cid
        assert 0.10 <= predict_step_time(c) / c.measured - 1 <= 0.35, cid


@pytest.mark.xfail(strict=True, reason="Cisco's H100 runs (NeMo 2.4, TE 2.5, no CUDA graphs, "
                   "delayed scaling): measured 0.742 / 0.527 s at DP 64 / TP 2, predicted -14.2 / "
                   "-32.5 %; TP 2 saves 29 % of the step as measured, 44 % as priced; cause not "
                   "identified (validation/mlperf/README.md)")
def test_the_cisco_h100_8b_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, [f"{LLAMA8B}h100-cisco-{n}g" for n in (64, 128)])


@pytest.mark.xfail(strict=True, reason="NVIDIA's GPT-3 175B recipe at MBS 2 on Eos (v4.1, NeMo "
                   "24.09, 256 / 512 H100): +14.9 / +12.9 %; the modelled compute alone exceeds "
                   "the measured step (9.85 against 9.54 s at 512 GPUs), so the FP8 GEMMs of this "
                   "tuned recipe run faster than dgx-h100's fitted efficiency; the v4.0 run of "
                   "the recipe is +10.7 % (validation/mlperf/README.md)")
def test_the_mbs2_gpt3_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, [f"mlperf41-gpt3-175b-h100-{n}g" for n in (256, 512)])


def test_the_b200_405b_runs_without_tp_overlap(cases):
    """The University of Florida's 405B runs on 256 / 448 B200 (v5.1) leave the userbuffers TP
    overlap off (TP_COMM_OVERLAP commented out in their configs): -1.2 / -2.0 % as run; priced
    with the overlap on, they would come out more than 5 % fast."""
    for n in (256, 448):
        c = cases[f"mlperf51-llama31-405b-b200-{n}g"]
        assert abs(predict_step_time(c) / c.measured - 1) <= 0.05, c.id
        overlapped = predict_step_time(_with(c, **{"training.tp_comm_overlap": True}))
        assert overlapped / c.measured - 1 < -0.05, c.id


NVFP4_GB200 = (512, 2560, 5120)


def test_the_nvfp4_405b_runs(cases):
    """NVIDIA's v5.1 Llama 3.1 405B runs in NVFP4 (precision fp4), never fitted (GB300's fp4
    efficiency is fitted on Megatron-Bridge's tables, GB200's is its FP8 value carried). Each
    within 10 % (today GB200 +0.4 / +1.6 / +2.8 %, GB300 -6.6 %), and the GB200 weak scaling
    from 512 to 5,120 GPUs, GPU-seconds a sample measured 1.124 / 1.193 (predicted 1.137 /
    1.221), within 3 points."""
    runs = [cases[f"mlperf51-llama31-405b-nvfp4-gb200-{n}g"] for n in NVFP4_GB200]
    runs.append(cases["mlperf51-llama31-405b-nvfp4-gb300-512g"])
    for c in runs:
        assert c.spec["workload"]["training"]["precision"] == "fp4"
        assert abs(predict_step_time(c) / c.measured - 1) <= 0.10, c.id
    m, p = _weak_scaling(runs[:3])
    assert m[1] == pytest.approx(1.124, abs=0.002) and m[2] == pytest.approx(1.193, abs=0.002)
    for n, mi, pi in zip(NVFP4_GB200, m, p, strict=True):
        assert abs(pi - mi) <= 0.03, (n, mi, pi)


def test_nvfp4_is_what_the_gb200_runs_needed(cases):
    """The same 512-GPU GB200 run priced in FP8 (tensorwise, the v5.0 recipe's family) comes out
    more than 25 % slow: the NVFP4 GEMMs are what made it 1.45x faster per sample than v5.0."""
    c = cases["mlperf51-llama31-405b-nvfp4-gb200-512g"]
    fp8 = _with(c, **{"training.precision": "fp8", "training.fp8_recipe": "tensorwise"})
    assert predict_step_time(fp8) / c.measured - 1 > 0.25


NVFP4_8B = "mlperf51-llama31-8b-nvfp4-"


def test_the_nvfp4_8b_runs(cases):
    """Llama 3.1 8B in NVFP4 (v5.1), never fitted: NVIDIA's two GB200 / GB300 trays within 5 %
    (today +0.5 / -3.9 %); the nine B200 runs all fast, the seven one-node runs by 5-9 % (today
    -5.5 .. -8.0 %; dgx-b200 carries gb200-nvl72's FP8 efficiency for NVFP4) and Nebius's 2- and
    4-node runs by 9-14 % (-12.7 / -11.5 %)."""
    runs = {cid: c for cid, c in cases.items()
            if cid.startswith(NVFP4_8B) and c.topology != "dgx-b300"}
    assert len(runs) == 11
    err = {cid: predict_step_time(c) / c.measured - 1 for cid, c in runs.items()}
    for gpu in ("gb200", "gb300"):
        assert abs(err[f"{NVFP4_8B}{gpu}-8g"]) <= 0.05, err
    b200 = {cid: e for cid, e in err.items() if "-b200-" in cid}
    assert len(b200) == 9 and all(e < 0 for e in b200.values()), b200
    for cid, e in b200.items():
        lo, hi = (-0.14, -0.09) if "nebius-16g" in cid or "nebius-32g" in cid else (-0.09, -0.05)
        assert lo <= e <= hi, (cid, e)


@pytest.mark.xfail(strict=True, reason="B200 NVFP4 at 2 / 4 nodes (Nebius): -12.7 / -11.5 %; "
                   "dgx-b200's NVFP4 efficiency is gb200-nvl72's FP8 value carried, and every "
                   "B200 NVFP4 run comes out fast (validation/mlperf/README.md)")
def test_the_multi_node_b200_nvfp4_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, [f"{NVFP4_8B}b200-nebius-{n}g" for n in (16, 32)])


B300 = "mlperf51-llama31-8b-"


def test_the_b300_runs(cases):
    """One HGX B300 node (dgx-b300, uncalibrated: B200's FP8 constants, GB300's NVFP4 and
    attention ones), never fitted. The FP8 runs within 5 % (today +2.9 / +2.5 %): on this part
    FP8 runs at B200's rate, as measured (0.548-0.551 s against the B200 node's 0.545 s). The
    NVFP4 runs come out fast (-11.8 / -14.4 %): the model gives B300 1.21x B200's NVFP4 step,
    the logs 1.13x; and a B300 holds the 8B plan in 109-115 of its 288 GB."""
    fp8 = [cases[f"{B300}b300-{s}-8g"] for s in ("dell", "supermicro")]
    fp4 = [cases[f"{B300}nvfp4-b300-{s}-8g"] for s in ("nebius", "lenovo")]
    for c in fp8:
        assert c.topology == "dgx-b300" and abs(predict_step_time(c) / c.measured - 1) <= 0.05
    for c in fp4:
        assert -0.18 <= predict_step_time(c) / c.measured - 1 <= -0.08, c.id
    b200 = cases[f"{NVFP4_8B}b200-nebius-8g"]
    gain = predict_step_time(b200) / predict_step_time(fp4[0])
    assert gain == pytest.approx(1.21, abs=0.03) and b200.measured / fp4[0].measured < 1.17


@pytest.mark.xfail(strict=True, reason="HGX B300 NVFP4 (dgx-b300 uncalibrated, gb300-nvl72's "
                   "NVFP4 efficiency carried): -11.8 / -14.4 %; measured, B300 runs the 8B NVFP4 "
                   "step 1.13x faster than B200, the model 1.21x (validation/mlperf/README.md)")
def test_the_b300_nvfp4_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, [f"{B300}nvfp4-b300-{s}-8g" for s in ("nebius", "lenovo")])


BLOCKS = FOLDER / "blocks" / "deepseekv3_671b_v6.0.json"


def test_the_deepseek_v3_values_are_the_median_of_their_blocks(cases):
    """Each v6.0 DeepSeek-V3 value is the median train_step_time over every one-step block of
    its three logs (validation/mlperf/blocks/, transcribed from the logs), and the blocks' wall
    times give the same value within 0.1 %."""
    logs = json.loads(BLOCKS.read_text())["logs"]
    systems = {"gb200-512g": "tyche-hsg_ngpu512", "gb200-2048g": "tyche-hsg_ngpu2048",
               "gb200-4096g": "tyche-hsg_ngpu4096", "gb200-8192g": "tyche-hsg_ngpu8192",
               "gb300-256g": "theia_ngpu256", "gb300-512g": "theia_ngpu512"}
    for tail, system in systems.items():
        n = _assert_the_median_of_the_blocks(cases[DSV3 + tail], logs, system, 3, "block_wall_s")
        assert n >= 135, tail


def _assert_the_median_of_the_blocks(case, logs, system, n_logs, wall_key):
    """``case.measured`` is the median block-level train_step_time over every block of the
    ``n_logs`` logs of ``system`` (a blocks/ file's ``logs``), their blocks' wall times (per
    step, ``wall_key``) give the same value within 0.1 %, and the logs ran the case's batch
    and sequence. Returns the number of blocks."""
    mine = [v for k, v in logs.items() if k.startswith(system + "_")]
    assert len(mine) == n_logs, system
    steps = [t for log in mine for t in log["train_step_time_s"]]
    walls = [t for log in mine for t in log[wall_key]]
    ov, w = case.spec["overrides"], case.spec["workload"]
    assert {log["global_batch_size"] for log in mine} == {ov.get(
        "training.global_batch_size", w["training"]["global_batch_size"])}, case.id
    assert {log["max_sequence_length"] for log in mine} == {ov.get(
        "model.seq_length", w["model"]["seq_length"])}, case.id
    assert case.measured == pytest.approx(statistics.median(steps), abs=5e-4), case.id
    assert statistics.median(walls) == pytest.approx(case.measured, rel=1e-3), case.id
    return len(steps)


LLAMA_V6 = "mlperf60-llama31-"
LLAMA_BLOCKS = FOLDER / "blocks" / "llama31_v6.0.json"


def test_the_v6_llama_values_are_the_median_of_their_blocks(cases):
    """The v6.0 Llama 3.1 values are the median train_step_time over every block of their
    logs (ten 8B logs on 1,024 GB200, three 405B logs on 2,048 GB300), and the blocks' wall
    times per step give the same value within 0.1 %; the logged batch and sequence are the
    cases'."""
    logs = json.loads(LLAMA_BLOCKS.read_text())["logs"]
    for tail, system, n_logs, n_blocks in (("8b-gb200-1024g", "tyche-hsg_ngpu1024", 10, 183),
                                           ("405b-nvfp4-gb300-2048g", "theia-cmh_ngpu2048", 3, 14)):
        n = _assert_the_median_of_the_blocks(cases[LLAMA_V6 + tail], logs, system, n_logs,
                                             "block_wall_per_step_s")
        assert n == n_blocks, tail


def test_the_v6_405b_run(cases):
    """Llama 3.1 405B in NVFP4 on 2,048 GB300 (v6.0, NeMo 26.04): within 5 % (today -2.7 %),
    and against the v5.1 run of the same plan on 512 GB300 (NeMo 25.09, 72 micro-batches a step
    against 16) a sample costs 1.049x the GPU-seconds as measured; the model gives 1.09x
    (the deeper relative bubble of 16 micro-batches), within 5 points."""
    new, old = cases[f"{LLAMA_V6}405b-nvfp4-gb300-2048g"], cases[
        "mlperf51-llama31-405b-nvfp4-gb300-512g"]
    assert abs(predict_step_time(new) / new.measured - 1) <= 0.05
    m, p = _weak_scaling([old, new])
    assert m[1] == pytest.approx(1.049, abs=0.002)
    assert abs(p[1] - m[1]) <= 0.05, p


def test_the_deepseek_v3_runs(cases):
    """DeepSeek-V3 671B, MXFP8, never fitted. GB300 (TP 1, no recompute, 240 / 120 micro-batches
    a step): within 5 % (today +3.2 / +1.8 %), and from 256 to 512 GPUs the step shrinks
    1.957x as measured, 1.983x predicted. GB200 (TP 2, 240 down to 16 micro-batches a step)
    comes out fast by 18-43 %: measured, a sample costs 1.09 / 1.24 / 1.61x the 512-GPU run's
    GPU-seconds at 2,048 / 4,096 / 8,192 GPUs; the model gives 1.03 / 1.06 / 1.12
    (validation/mlperf/README.md)."""
    pred = {cid: predict_step_time(c) for cid, c in cases.items() if cid.startswith(DSV3)}
    gb300 = [f"{DSV3}gb300-{n}g" for n in (256, 512)]
    for cid in gb300:
        assert abs(pred[cid] / cases[cid].measured - 1) <= 0.05, (cid, pred[cid])
    measured = cases[gb300[0]].measured / cases[gb300[1]].measured
    assert measured == pytest.approx(1.957, abs=0.002)
    assert pred[gb300[0]] / pred[gb300[1]] == pytest.approx(measured, rel=0.03)
    m, p = _weak_scaling([cases[cid] for cid in DSV3_GB200])
    assert m[1:] == pytest.approx([1.086, 1.235, 1.609], abs=0.003), m
    assert all(b > a for a, b in itertools.pairwise(p)), p  # the order is right
    assert p[-1] < 1.2, p


@pytest.mark.xfail(strict=True, reason="DeepSeek-V3 on GB200 at TP 2 (v6.0): -18 / -22 / -30 / "
                   "-43 % at 512 / 2,048 / 4,096 / 8,192 GPUs, while the GB300 runs at TP 1 of the "
                   "same recipe are +3.2 / +1.8 %; the per-step cost that grows as the "
                   "micro-batches a step fall from 240 to 16 is not identified "
                   "(validation/mlperf/README.md)")
def test_the_gb200_deepseek_runs_within_the_bar(cases):
    _assert_within_the_bar(cases, list(DSV3_GB200))
