"""Published runs of other stacks, long sequences and small-model FP8
(validation/stacks/): out of sample, nothing fitted on them. Each states its stack,
release and unknowns, fits in memory as it ran, and is predicted within its bar."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import yaml

from simulator.api import resolve, simulate_resolved
from simulator.config import load_topology
from simulator.config.stacks import load_stack
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.validation.cases import load_cases
from simulator.validation.predict import plausible_range, predict_step_time
from simulator.validation.stacks import (
    FITTED_ON,
    FOLDER,
    crossvalidate,
    fit_stack_factor,
    group_meta,
    predict_all,
    report,
)


@pytest.fixture(scope="module")
def records():
    return predict_all()


def test_each_run_states_stack_release_and_unknowns_and_fits():
    meta = group_meta()
    cases = load_cases(FOLDER)
    assert len(cases) >= 25 and len({meta[c.group]["source_id"] for c in cases}) >= 4
    for c in cases:
        train = c.spec["workload"]["training"]
        assert train.get("stack", "megatron") == meta[c.group]["stack"], c.id
        assert c.recipe["source"] and isinstance(c.recipe["unknown"], list), c.id
        # on the part the run had (the 40 GB A100 of GPT-NeoX-20B: the group's
        # topology_overrides; the 96 GB H100 of the torchao README: grand-teton-h100)
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"],
                       c.topology_overrides)
        rep = estimate_memory(w, Topology.from_config(t))
        assert rep.fits, f"{c.id}: {rep.explain()}"


def test_long_sequence_megatron_on_h100_within_5_percent(records):
    # NeMo 24.03 (TE with flash-attn 2 on Hopper), 16K-1M tokens, with and without CP:
    # all within 2.4 % now; with the fitted TE constant they were 17-27 % too fast
    rows = [r for r in records if r["source"] == "nemo-performance-long-sequence"
            and r["band"] != "< 8K" and not r["id"].endswith("-8k")]
    assert len(rows) == 7
    assert all(abs(r["error"]) <= 0.05 for r in rows), rows


def test_b200_long_sequence_is_never_fitted_and_judged_on_kernel_attention(records):
    # B200 fused attention is the cuDNN SDPA kernel's benchmarked rate
    # (topologies/dgx-b200.yaml, simulator/compute/attention.py): no constant is fitted on
    # this source, so left out it is predicted exactly as shipped
    src = "nemo-performance-long-sequence-b200"
    assert src not in FITTED_ON
    rows = [r for r in records if r["source"] == src]
    assert len(rows) == 8
    cv = {r["id"]: r for r in crossvalidate(records) if r["source"] == src}
    assert all(cv[r["id"]]["predicted"] == r["predicted"] for r in rows)
    errs = [r["error"] for r in rows]
    # too fast on every row (-1.2 ... -15.8 % now), most where attention is most of the
    # step (8K ~40 %, 256K-1M ~95 %): NeMo 25.04 (cuDNN 9.7) ran attention ~17 % below the
    # cuDNN 9.10-9.13 benchmark; with GB200's fitted 0.302 these rows were 4.5-43 % too slow
    assert all(-0.17 <= e < 0 for e in errs), errs
    assert statistics.median(abs(e) for e in errs) <= 0.13
    assert max(errs[4:]) < min(errs[:2])  # 128K-1M further off than 8K-16K


def test_megatron_stack_and_long_band_meet_the_source_out_bar(records):
    # issue 28's bar, source left out, per stack and per sequence band: median <= 6 %,
    # worst <= 20 %. No topology constant is fitted on validation/stacks/ (FITTED_ON is
    # empty) and a stack's fitted factor is judged with its source left out, so every plain
    # error is a left-out one.
    assert not FITTED_ON
    assert {r["stack"] for r in records if "factor" in r} == {"deepspeed"}
    for key, value in (("stack", "megatron"), ("stack", "fsdp1"), ("band", ">= 32K"),
                       ("band", "8K-31K"), ("band", "< 8K")):
        errs = [abs(r["error"]) for r in records if r[key] == value]
        assert len(errs) >= 12
        assert statistics.median(errs) <= 0.06, (value, statistics.median(errs))
        if value != "< 8K":  # its worst: test_short_band_worst_run_meets_the_bar
            assert max(errs) <= 0.20, (value, max(errs))


@pytest.mark.xfail(strict=True, reason=(
    "NeMo AutoModel's four Llama 3.3 70B LoRA rows on TP 2 without sequence parallelism or "
    "compile (DTensor eager) x PP 4 x VP 10 run 21-25 % slower than predicted, against -2 / -7 % "
    "for the same recipes' Qwen2.5 32B rows without TP (validation/analysis.md, 'AutoModel's "
    "pipelined LoRA rows'); the leading candidate, a host bound by torch 2.8's DTensor dispatch "
    "(reports/dtensor_lora_host.md: 1.11x on torch 2.11), is not measured for torch 2.8"))
def test_short_band_worst_run_meets_the_bar(records):
    errs = [abs(r["error"]) for r in records if r["band"] == "< 8K"]
    assert max(errs) <= 0.20, max(errs)


def test_torchtitan_runs_meet_the_bar(records):
    # torchtitan ships no factor, so the plain errors are the source-left-out ones. 17 runs
    # of four sources: median 5.8 %, worst 16.6 %, a thin margin. The float8 blog's 70B rows
    # on 128 and 512 GPUs are 7.4-16.7 % too slow at the best plan that fits and its 405B
    # rows on 512 GPUs 6-9 % too fast (validation/analysis.md); its 1.8B rows (IBM's
    # llama3_1.8b shape, assumed) are within 2 %
    errs = _bar([{**r, "cv_error": r["error"]} for r in records], "torchtitan", 17)
    assert statistics.median(errs) <= 0.06


def test_fsdp_and_fp8_stacks_beat_the_megatron_profile(records):
    # PyTorch FSDP1 / FSDP2 + float8 runs: their own profile against Megatron's kernels
    mine = {r["id"]: r["error"] for r in records if r["stack"] in ("fsdp1", "torchtitan")
            and r["source"] in ("fms-fsdp-readme", "pytorch-blog-float8-fsdp2")}
    assert len(mine) >= 8
    cases = {c.id: c for c in load_cases(FOLDER)}
    other = {}
    for cid in mine:  # the plan each row states, on Megatron's kernels
        c = cases[cid]
        c.spec["overrides"] = {**c.spec["overrides"], "training.stack": "megatron"}
        other[cid] = predict_step_time(c) / c.measured - 1
    # the 7B-13B runs (FP8 and bf16, A100 and H100): their profile within 4 % at the median,
    # the megatron profile 10-22 % too fast on the compute-bound ones (the issue's "FSDP stacks
    # 11-19 % too fast"; the 13B HSDP / FSDP rows on fms-fsdp's 400-800 Gb/s nodes are
    # network-bound under either profile)
    small = [cid for cid in mine if "-7b" in cid or "-8b" in cid or "-13b" in cid]
    assert len(small) == 10
    assert statistics.median(abs(mine[c]) for c in small) < 0.04, mine
    assert statistics.median(other[c] for c in small) < -0.10, other
    assert sum(other[c] < -0.10 for c in small) >= 7, other
    # all 28 now: median 5.8 %, worst 17.4 % (fms-fsdp 13B HSDP on 96 H100); the float8
    # blog's 70B / 405B rows on 128 GPUs are 6-17 % too slow at the best plan that fits (its
    # FP8 gain, 1.50x, is above the predicted 1.41x), its 405B rows on 512 GPUs 6-9 % too
    # fast (micro-batch 4 searched)
    assert statistics.median(abs(e) for e in mine.values()) <= 0.08, mine
    assert max(abs(e) for e in mine.values()) <= 0.20, mine


def test_torchao_readme_h100_fp8_gain_as_measured(records):
    # torchao's float8 README, Llama 3 8B on 8 H100 with per-op SAC: float8 tensorwise runs
    # 1.250x the bf16 tokens/s; the model's gain is within 3 % of it
    by = {r["id"]: r for r in records if r["source"] == "torchao-float8-readme"}
    bf16, fp8 = by["torchao-readme-8b-h100-bf16"], by["torchao-readme-8b-h100-fp8"]
    measured = bf16["measured"] / fp8["measured"]
    predicted = bf16["predicted"] / fp8["predicted"]
    assert measured == pytest.approx(1.25, abs=0.005)
    assert predicted == pytest.approx(measured, rel=0.03)


def test_torchao_readme_rowwise_row_between_bf16_and_tensorwise(records):
    # the README's third row: float8 rowwise with a bf16 all-gather, 1.10x the bf16 tokens/s
    # against tensorwise's 1.25x. Priced by the torchtitan profile's recipes.rowwise (more
    # cast bytes, the bf16 gather, the backward rescale): the same order, the gain within
    # 4 % and the step within 7 % (-6.3 % now: the forward CUTLASS GEMM is timed at the
    # tensorwise rate, the top of the 90-100 % pytorch/pytorch#147971 reports)
    by = {r["id"]: r for r in records if r["source"] == "torchao-float8-readme"}
    bf16, tw, rw = (by[f"torchao-readme-8b-h100-{p}"] for p in ("bf16", "fp8", "rowwise"))
    assert bf16["measured"] / rw["measured"] == pytest.approx(1.1005, abs=0.001)
    assert bf16["predicted"] > rw["predicted"] > tw["predicted"]
    gain = bf16["predicted"] / rw["predicted"]
    assert gain == pytest.approx(bf16["measured"] / rw["measured"], rel=0.04)
    assert abs(rw["error"]) <= 0.07, rw


def test_torchao_readme_h100_steps_on_the_part_they_ran_on(records):
    # The source's own tutorial logs print a 95.0 GiB device: a 96 GB Grand Teton H100
    # (HBM2e, below 700 W; topologies/grand-teton-h100.yaml and its sources), not the
    # 80 GB DGX H100. On it both rows are within 5 %; on the DGX H100 they were 20 % fast.
    by = {r["id"]: r for r in records if r["source"] == "torchao-float8-readme"}
    assert len(by) == 3
    assert all(abs(by[f"torchao-readme-8b-h100-{p}"]["error"]) <= 0.05
               for p in ("bf16", "fp8")), by
    case = next(c for c in load_cases(FOLDER) if c.id == "torchao-readme-8b-h100-bf16")
    assert case.topology == "grand-teton-h100" and not case.topology_overrides
    gpu = load_topology(case.topology).gpu
    assert gpu.power_limit_W == 500 and gpu.hbm_bandwidth_TBps == 2.4
    assert gpu.hbm_usable_MiB / 1024 == pytest.approx(30.99 / 0.3262, abs=0.05)  # its log
    w, t = resolve(case.spec["workload"], "dgx-h100", case.spec["overrides"], {})
    dgx = float(simulate_resolved(w, t)[0].step_time_s)
    assert dgx / case.measured - 1 < -0.15  # the 80 GB, 700 W part: far too fast


def _nvfp4_doc_memory_GiB() -> dict[str, float]:
    out = {}
    for c in load_cases(FOLDER):
        if c.group == "torchtitan-nvfp4-doc-gb200":
            w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"], {})
            out[c.id] = estimate_memory(w, Topology.from_config(t)).memory_per_gpu_GB / 1.073741824
    return out


def test_torchtitan_nvfp4_doc_gb200_memory_and_bf16_step(records):
    """torchtitan's NVFP4 doc, Llama 3 8B on 4 GB200 (per-op SAC, chunked loss, cuDNN
    attention): the bf16 row's peak reserved memory it publishes within 5 %, which needs the
    chunked loss (whole fp32 logits would not fit), and the bf16 step within 5 %."""
    mem = _nvfp4_doc_memory_GiB()
    assert mem["titan-nvfp4-doc-8b-gb200-bf16"] == pytest.approx(174.49, rel=0.05)
    c = next(c for c in load_cases(FOLDER) if c.id == "titan-nvfp4-doc-8b-gb200-bf16")
    whole = {**c.spec["overrides"], "training.loss_num_chunks": 1}
    w, t = resolve(c.spec["workload"], c.topology, whole, {})
    assert not estimate_memory(w, Topology.from_config(t)).fits
    by = {r["id"]: r for r in records if r["source"] == "torchtitan-nvfp4-doc"}
    assert abs(by["titan-nvfp4-doc-8b-gb200-bf16"]["error"]) <= 0.05


@pytest.mark.xfail(strict=True, reason="the doc's MXFP8 row reserves 5.45 GiB more than its "
                   "bf16 row; the model's MXFP8 adds 0.7 GiB, and what the run holds beyond that "
                   "was not found, so the row is 5.1 % low: validation/analysis.md")
def test_torchtitan_nvfp4_doc_mxfp8_memory_as_published():
    assert _nvfp4_doc_memory_GiB()["titan-nvfp4-doc-8b-gb200-mxfp8"] == pytest.approx(
        179.94, rel=0.05)


@pytest.mark.xfail(strict=True, reason="torchao MXFP8 on GB200 gains 1.28x over bf16 in "
                   "torchtitan's NVFP4 doc; the model's MXFP8 (GEMM rate fitted on "
                   "Megatron-Core + TE runs) gives 1.47x, 11 % too fast: validation/analysis.md")
def test_torchtitan_nvfp4_doc_mxfp8_gain_as_measured(records):
    by = {r["id"]: r for r in records if r["source"] == "torchtitan-nvfp4-doc"}
    bf16, mx = by["titan-nvfp4-doc-8b-gb200-bf16"], by["titan-nvfp4-doc-8b-gb200-mxfp8"]
    assert bf16["predicted"] / mx["predicted"] == pytest.approx(
        bf16["measured"] / mx["measured"], rel=0.05)


def test_best_plan_searches_what_the_source_explored(records):
    plans = {r["id"]: r["plan"] for r in records if r["plan"]}
    assert plans["f8fsdp2-70b-bf16"] == "micro_batch_size 3, recompute full"  # 4 does not fit
    # selective on torchtitan is its per-op SAC (stacks/torchtitan.yaml): it lets micro-batch
    # 3 fit, which beats micro-batch 1 without recompute per token
    assert plans["f8fsdp2-8b-bf16"] == "micro_batch_size 3, recompute selective"
    assert next(c for c in load_cases(FOLDER) if c.id == "f8fsdp2-8b-bf16").spec[
        "best_of"]["training.recompute"] == ["none", "selective", "full"]
    rows = {r["id"]: r for r in records}
    cases = {c.id: c for c in load_cases(FOLDER)}
    case = cases["f8fsdp2-70b-bf16"]
    own = dataclasses.replace(case, spec={**case.spec, "best_of": {}})
    stated = predict_step_time(own)  # the row's own plan, mbs 1
    assert rows["f8fsdp2-70b-bf16"]["predicted"] < stated
    # every consumer of validation cases (intervals, crossval, validate) gets the searched
    # plan from the one predictor
    assert predict_step_time(case) == pytest.approx(rows["f8fsdp2-70b-bf16"]["predicted"])


def test_report_slices_by_stack_band_gpu_and_source(records):
    text = report(records, crossvalidate(records))
    for heading in ("By stack", "By band", "By gpu", "By source", ">= 32K", "torchtitan"):
        assert heading in text
    cv = crossvalidate(records)
    # a stack with a single source gets no factor: its source-out error is the plain one
    single = [r for r in cv if r["stack"] == "fsdp1"]
    assert single and all(r["factor"] == 1.0 and r["cv_error"] == r["error"] for r in single)


def _bar(cv: list[dict], stack: str, n: int) -> list[float]:
    """Source-left-out |errors| of ``stack``'s runs; the issue's bar is median <= 6 %,
    worst <= 20 % per stack."""
    errs = [abs(r["cv_error"]) for r in cv if r["stack"] == stack]
    assert len(errs) == n, errs
    assert statistics.median(errs) <= 0.06 and max(errs) <= 0.20, errs
    return errs


def test_deepspeed_runs_meet_the_bar(records):
    # three sources of DeepSpeed's 2021-22 pipeline engine (MT-NLG 530B, GPT-NeoX-20B,
    # GLM-130B), each judged with the engine factor fitted on the other two
    errs = _bar(crossvalidate(records), "deepspeed", 6)
    assert max(errs) <= 0.10, errs


def test_deepspeed_pipeline_engine_factor_is_judged_with_its_source_left_out(records):
    # three sources of DeepSpeed's 2021-22 pipeline engine agree on the sign: without the
    # profile's factor the model is too fast on each; stacks/deepspeed.yaml ships the factor
    # fitted on all (each source one vote), and each source is judged with the factor fitted
    # on the other two
    rows = {r["id"]: r for r in records if r["stack"] == "deepspeed"}
    raw = {i: r["raw"] / r["measured"] - 1 for i, r in rows.items()}
    assert len(rows) == 6 and all(-0.25 < e < -0.10 for e in raw.values()), raw
    shipped = load_stack("deepspeed").efficiency["pipeline_engine"]
    meta = group_meta()
    cases = [c for c in load_cases(FOLDER) if meta[c.group]["stack"] == "deepspeed"]
    assert fit_stack_factor(cases)[0] == pytest.approx(shipped, abs=0.002)
    for cid, r in rows.items():
        others = [c for c in cases if meta[c.group]["source_id"] != r["source"]]
        assert r["factor"] == fit_stack_factor(others)[0]
        assert r["shipped_error"] == pytest.approx(r["shipped"] / r["measured"] - 1)
        # the reported error is the left-out one, and it beats running without the factor
        assert r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1)
        assert abs(r["error"]) < abs(raw[cid]) and abs(r["error"]) <= 0.12, r
    # one left-out factor per source, and the two outer sources pull it apart (without MT-NLG
    # 1.20, without NeoX 1.25): the left-out errors straddle 0
    by_source = {r["source"]: r["factor"] for r in rows.values()}
    assert len(by_source) == 3 and len(set(by_source.values())) == 3, by_source
    assert by_source["mtnlg-530b-paper"] < shipped < by_source["gpt-neox-20b-paper"], by_source
    assert min(r["error"] for r in rows.values()) < 0 < max(r["error"] for r in rows.values())
    assert statistics.median(abs(r["error"]) for r in rows.values()) < \
        statistics.median(abs(e) for e in raw.values()) / 2


@pytest.mark.xfail(strict=True, reason=(
    "NeMo AutoModel, 15 runs of one source: median 7.1 % (bar 6 %), worst 24.6 % (bar 20 %). "
    "Its four Llama 3.3 70B LoRA rows on eager TP 2 x PP 4 are 21-25 % too fast "
    "(test_automodel_pipelined_lora_rows); Llama 3 70B on 64 H100 (FSDP2 32 x CP 2, 8K) "
    "+12.4 %: the FSDP2 copy kernels (1.14 s) and FA2's measured 35 % of peak are sourced, "
    "the run's 389 model TFLOP/s needs more than the simulator's FA2 and GEMM rates give; "
    "Kimi K2 (256 H100, PP 8 x EP 32) -9.9 %; the two one-GPU LoRA rows +7.1 / +6.1 %"))
def test_nemo_automodel_runs_meet_the_bar(records):
    _bar(crossvalidate(records), "nemo-automodel", 15)


def test_nemo_automodel_lora_rows(records):
    # AutoModel's LoRA table (frozen base, dim-16 adapters on every projection): the TP 2 rows
    # on one and two nodes within 10 %, and the two-node step faster than the one-node step
    # by about what was measured (GA 4 -> 2 over twice the GPUs)
    rows = {r["id"]: r for r in records
            if r["id"].startswith("automodel-lora-") and "-lora-pp-" not in r["id"]}
    assert len(rows) == 6
    tp2 = [r for cid, r in rows.items() if "-1g" not in cid]
    assert len(tp2) == 4 and all(abs(r["error"]) <= 0.10 for r in tp2), tp2
    for model in ("llama3-70b", "qwen25-32b"):
        one, two = rows[f"automodel-lora-{model}-h100-8g"], rows[f"automodel-lora-{model}-h100-16g"]
        assert two["predicted"] / one["predicted"] == pytest.approx(
            two["measured"] / one["measured"], rel=0.10)
    # one GPU, Hugging Face model with Liger kernels (post-dropout adapters in the Llama
    # recipe, none in the Qwen one): within 10 %, though too slow (+7 / +6 %), as the one-GPU
    # SDPA-backend runs are (validation/analysis.md: GEMM constants fitted on 8-GPU steps)
    single = [r["error"] for cid, r in rows.items() if "-1g" in cid]
    assert len(single) == 2 and all(0 < e <= 0.10 for e in single), single


def test_automodel_pipelined_lora_rows(records):
    # the table's earlier LoRA rows (PP 4 interleaved, one schedule per gradient-accumulation
    # step, judged against the step over GA): without TP (Qwen2.5 32B, Hugging Face model with
    # Liger kernels) within 8 %; on eager TP 2 (Llama 3.3 70B) 18-28 % too fast, the known miss
    # (test_short_band_worst_run_meets_the_bar). The model carries what changed between them:
    # two nodes against one per micro-batch, and 822effa16's TE RMSNorm against the eager one.
    rows = {r["id"].removeprefix("automodel-lora-pp-"): r for r in records
            if r["id"].startswith("automodel-lora-pp-")}
    assert len(rows) == 6
    qwen = [r["error"] for cid, r in rows.items() if cid.startswith("qwen")]
    llama = [r["error"] for cid, r in rows.items() if cid.startswith("llama")]
    assert len(qwen) == 2 and all(abs(e) <= 0.08 for e in qwen), qwen
    assert len(llama) == 4 and all(-0.28 < e < -0.18 for e in llama), llama
    runs = {(gpus, when): rows[f"llama3-70b-h100-{gpus}-{when}"]
            for gpus, when in (("8g", "2025-11"), ("16g", "2025-12"), ("8g", "2026-01"),
                               ("16g", "2026-01"))}
    # per micro-batch, 16 GPUs (8 per schedule) against 8 (4 per schedule), in each release
    for one, two in ((runs["8g", "2025-11"], runs["16g", "2025-12"]),
                     (runs["8g", "2026-01"], runs["16g", "2026-01"])):
        meas = (two["measured"] / 8) / (one["measured"] / 4)
        pred = (two["predicted"] / 8) / (one["predicted"] / 4)
        assert pred == pytest.approx(meas, abs=0.05), (two["id"], meas, pred)
    # 822effa16's TE RMSNorm against the eager Hugging Face one, on each GPU count
    for old, new in ((runs["8g", "2025-11"], runs["8g", "2026-01"]),
                     (runs["16g", "2025-12"], runs["16g", "2026-01"])):
        meas, pred = new["measured"] / old["measured"], new["predicted"] / old["predicted"]
        assert pred < 1 and meas < 1, (new["id"], meas, pred)
        assert pred == pytest.approx(meas, abs=0.04), (new["id"], meas, pred)


def test_automodel_one_gpu_lora_cases_keep_their_recipes_dropout():
    # the two one-GPU LoRA recipes at 507bfb751 differ: llama3_1_8b_peft_benchmark.yaml sets
    # peft.dropout 0.1, qwen2_5_7b_peft_benchmark.yaml 0.0 (a case is its recipe)
    cases = {c.id: c for c in load_cases(FOLDER)}
    want = {"automodel-lora-llama31-8b-h100-1g": 0.1, "automodel-lora-qwen25-7b-h100-1g": 0.0}
    for cid, p in want.items():
        w, _ = resolve(cases[cid].spec["workload"], cases[cid].topology,
                       cases[cid].spec["overrides"], cases[cid].topology_overrides)
        assert w.training.lora_dropout == p, cid
    # and the dropout is what it costs: the Qwen row priced with the Llama recipe's dropout
    # is slower by the adapters' dropout kernels (~6 % of its step)
    c = cases["automodel-lora-qwen25-7b-h100-1g"]
    plain = predict_step_time(c)
    c.spec["overrides"] = {**c.spec["overrides"], "training.lora_dropout": 0.1}
    assert 1.03 < predict_step_time(c) / plain < 1.10


def test_deepspeed_blocking_sends_slow_the_mtnlg_plan(records):
    # the physics DeepSpeed's engine adds over Megatron's: each pipeline send holds its sender
    cases = {c.id: c for c in load_cases(FOLDER)}
    for cid in ("mtnlg-530b-2240g", "mtnlg-530b-3360g"):
        c = cases[cid]
        mine = next(r["predicted"] for r in records if r["id"] == cid)
        c.spec["overrides"] = {**c.spec["overrides"], "training.stack": "megatron"}
        assert mine > predict_step_time(c)


def test_stated_unknowns_give_a_range_around_the_stated_assumption(records):
    # a group's `plausible:` values are predicted too: the range they span with the stated
    # assumption, never used to choose (the error stays the assumption's)
    rows = {r["id"]: r for r in records if "plausible" in r}
    assert {"mtnlg-530b-2240g", "f8fsdp2-70b-fp8"} <= set(rows)
    for r in rows.values():
        assert r["low"] <= r["error"] <= r["high"], r
    # the stated value, where the grid lists it, is the case's own prediction
    assert rows["mtnlg-530b-2240g"]["plausible"]["micro_batch_size 1"] == pytest.approx(
        rows["mtnlg-530b-2240g"]["error"], abs=1e-12)
    assert rows["f8fsdp2-70b-fp8"]["plausible"]["attention_family fa2"] == pytest.approx(
        rows["f8fsdp2-70b-fp8"]["error"], abs=1e-12)
    # a faster attention kernel never lengthens a step: cuDNN (0.51-0.62 of peak on H100)
    # against FlashAttention-2 (0.35) on every float8-blog row
    titan = [r for r in rows.values() if r["stack"] == "torchtitan"]
    assert len(titan) == 12
    assert all(r["plausible"]["attention_family cudnn"] < r["plausible"]["attention_family fa2"]
               for r in titan)
    # MT-NLG: the unstated micro-batch size brackets the measurement (1: -19 to -22 %)
    mtnlg = [r for r in rows.values() if r["id"].startswith("mtnlg")]
    assert len(mtnlg) == 3 and all(r["low"] < 0 < r["high"] for r in mtnlg)
    # GLM-130B: micro-batch 4 would not fit 40 GB, so its range is 1 and 2 only
    glm = [r for r in rows.values() if r["id"].startswith("glm-130b")]
    assert len(glm) == 2 and all(set(r["plausible"]) == {"micro_batch_size 1", "micro_batch_size 2"}
                                 for r in glm), glm
    text = report(records, crossvalidate(records))
    assert "What the stated unknowns allow" in text and "micro_batch_size 2" in text


def test_a_plausible_value_the_run_could_not_fit_is_left_out():
    case = next(c for c in load_cases(FOLDER) if c.id == "mtnlg-530b-2240g")
    # 240 sequences per micro-batch divides GBS 1920 over DP 8, but cannot fit on 80 GB
    odd = dataclasses.replace(case, spec={**case.spec, "plausible": [
        {"training.micro_batch_size": 1}, {"training.micro_batch_size": 240}]})
    assert [label for label, _ in plausible_range(odd)] == ["micro_batch_size 1"]


def test_a_malformed_plausible_grid_names_the_group_and_field(tmp_path):
    group = yaml.safe_load((FOLDER / "deepspeed.yaml").read_text())[0]
    group["plausible"] = {"training.micro_batch_size": []}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump([group]))
    with pytest.raises(ConfigError, match=r"plausible\.training\.micro_batch_size"):
        load_cases(tmp_path)
    # the list form (alternatives that go together), on one row
    group["plausible"] = {}
    group["cases"][0]["plausible"] = [{}]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump([group]))
    with pytest.raises(ConfigError, match=r"mtnlg-530b-a100\.mtnlg-530b-2240g\.plausible"):
        load_cases(tmp_path)
    group["cases"][0]["plausible"] = [{"training.micro_batch_size": 2,
                                       "parallelism.pipeline": 35}]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump([group]))
    row = load_cases(tmp_path)[0]
    assert row.spec["plausible"] == [{"training.micro_batch_size": 2,
                                      "parallelism.pipeline": 35}]
    assert load_cases(tmp_path)[1].spec["plausible"] == []  # the row's own, not the group's


def test_a_malformed_case_file_is_one_line_and_exit_2(tmp_path, capsys):
    from simulator.validation.stacks import main
    group = yaml.safe_load((FOLDER / "deepspeed.yaml").read_text())[0]
    group["plausible"] = {"training.micro_batch_size": []}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump([group]))
    assert main(["--folder", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "plausible.training.micro_batch_size" in err


def test_glm_130b_rows_are_the_logged_throughput_of_a_fully_recomputed_run():
    # THUDM/GLM-130B logs/main-log-en.md: 134 TFLOPS at 88.5 s (GBS 4224) and 141 TFLOPS at
    # 122.5 s (GBS 6144) on 768 GPUs, 48 and 50 samples/s. Narayanan et al.'s Eq. 3 counts the
    # recompute forward; GeGLU at 32768 = 8h/3 has the 8 h^2 FFN weights it assumes, so the
    # model's own FLOPs (4/3 of the layers + the logits) give the same count
    from simulator.metrics.flops import model_flops_per_step
    from simulator.validation.cases import narayanan_flops
    cases = {c.id: c for c in load_cases(FOLDER) if c.id.startswith("glm-130b")}
    logged = {"glm-130b-768g-gbs4224": (134, 48), "glm-130b-768g-gbs6144": (141, 50)}
    assert set(cases) == set(logged)
    for cid, (tflops, samples) in logged.items():
        c = cases[cid]
        w, _ = resolve(c.spec["workload"], c.topology, c.spec["overrides"], c.topology_overrides)
        eq3 = narayanan_flops(w)
        assert eq3 / (768 * c.measured) / 1e12 == pytest.approx(tflops, abs=0.5)
        assert w.training.global_batch_size / c.measured == pytest.approx(samples, abs=0.5)
        s, h, V = w.model.seq_length, w.model.hidden_size, w.model.vocab_size
        logits = 6.0 * w.training.global_batch_size * s * h * V
        assert 4 / 3 * (model_flops_per_step(w) - logits) + logits == pytest.approx(eq3, rel=1e-12)


def test_the_gpu_column_names_a_renamed_part(records):
    # the A100-40GB runs (GPT-NeoX-20B, GLM-130B) rename the part in their overrides; fms-fsdp
    # only restates the network of the same 80 GB part; a shipped part carries no mark
    gpu = {r["id"]: r["gpu"] for r in records}
    assert gpu["glm-130b-768g-gbs4224"] == gpu["gpt-neox-20b-96g"] == "dgx-a100 (A100-SXM4-40GB)*"
    assert gpu["fms-fsdp-7b-a100"] == "dgx-a100*"
    assert gpu["mtnlg-530b-2240g"] == "dgx-a100"
