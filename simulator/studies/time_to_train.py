"""Report: time-to-train and cost against GPU count, and where the wall time goes.

Writes ``reports/time_to_train.md`` and ``reports/figures/time_to_train.png``::

    PYTHONPATH=$PWD python -m simulator.studies.time_to_train

One model (Llama 3 405B, its shipped plan TP 8 x PP 16 VP 2, global batch 2048 sequences of
8K tokens) on DGX H100 at a growing data-parallel degree, trained on 15T tokens. More GPUs
cut the days until the pipeline bubble (fewer micro-batches per replica), the step's
straggler tail and the failures of a larger job eat the gain; the cost (GPU-hours x price)
rises throughout. The price is an input of this report, stated in it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..api import simulate
from ..io import atomic_write_text
from ..reliability.run import TimeToTrain, time_to_train
from ..validation.scale_fit import fit, render, scale_groups
from ..validation.scale_probe import render as render_probe
from ..validation.scale_probe import run_all
from ..validation.step_spread import render as render_spread
from ..validation.step_spread import spreads

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 15e12
PRICE = 2.0  # USD per GPU-hour, an assumption of this report (stated in it)
DATA = (8, 16, 32, 64, 128)
ZERO2 = {"training.use_megatron_fsdp": True,
         "training.data_parallel_sharding_strategy": "optim_grads"}
PARTS = ("compute", "bubble", "exposed_comm", "variability", "checkpoint", "lost_work",
         "restart")


def fitting_plan(data: int) -> dict[str, object]:
    """Overrides of the shipped Llama 3 405B plan at ``data``-way DP that fit in memory: the
    fewest recomputed layers per model chunk (Megatron ``--recompute-granularity full
    --recompute-method block --recompute-num-layers k``, k = 0 to all 4), as a planner
    would set them. Without recompute the plan does not fit at any of these GPU counts
    (``clustersim memory``)."""
    base: dict[str, object] = {"parallelism.data": data}
    for k in range(5):
        plan = base if k == 0 else {**base, "training.recompute_granularity": "full",
                                    "training.recompute_method": "block",
                                    "training.recompute_num_layers": k}
        if simulate("llama3-405b", "dgx-h100", overrides=plan, variability=False).fits_in_memory:
            return plan
    raise ValueError(f"Llama 3 405B does not fit at DP {data} even with full recompute")


def recomputed_layers(plan: dict[str, object]) -> int:
    return int(plan.get("training.recompute_num_layers", 0))


def points(seed: int = 0) -> list[tuple[dict[str, object], TimeToTrain]]:
    out = []
    for d in DATA:
        plan = fitting_plan(d)
        out.append((plan, time_to_train("llama3-405b", "dgx-h100", TOKENS, overrides=plan,
                                        seed=seed, price_per_gpu_hour=PRICE, mc_runs=50,
                                        mc_steps=16)))
    return out


def figure(rows: list[TimeToTrain], path: Path) -> None:
    gpus = [r.num_gpus for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    days = [r.days for r in rows]
    lo = [r.days - r.monte_carlo["days_p10"] for r in rows]
    hi = [r.monte_carlo["days_p90"] - r.days for r in rows]
    a.errorbar(gpus, days, yerr=[lo, hi], marker="o", color="C0", label="days (p10-p90)")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("GPUs (H100)")
    a.set_ylabel("days to train 15T tokens", color="C0")
    c = a.twinx()
    c.plot(gpus, [r.cost_usd / 1e6 for r in rows], marker="s", color="C3", label="cost")
    c.set_ylabel(f"cost, M USD at ${PRICE:.2f}/GPU-h", color="C3")
    a.set_title("Llama 3 405B: time-to-train and cost vs GPU count")
    bottom = [0.0] * len(rows)
    for i, part in enumerate(PARTS):
        vals = [100 * r.breakdown_fraction[part] for r in rows]
        b.bar([str(g) for g in gpus], vals, bottom=bottom, label=part, color=f"C{i}")
        bottom = [x + y for x, y in zip(bottom, vals, strict=True)]
    b.set_ylabel("% of wall time")
    b.set_xlabel("GPUs")
    b.set_title("Where the wall time goes")
    b.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(points_: list[tuple[dict[str, object], TimeToTrain]], fit_table: str,
             llama: TimeToTrain, probe_table: str, spread_table: str, zero2) -> str:
    head = ("| GPUs | recomputed layers per chunk | memory (GB) | step ideal / mean / p99 (s) "
            "| days (p10-p90) | GPU-hours | cost (M$) | interruptions | goodput | ckpt every "
            "| energy (MWh) | days saved by the doubling | extra k$ per day saved |\n"
            "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    rows = [r for _, r in points_]
    zero2_dp_s = zero2.exposed_comm_s['dp']
    for i, (plan, r) in enumerate(points_):
        mc = r.monte_carlo
        if i:
            saved = rows[i - 1].days - r.days
            marginal = (f"{saved:.1f} ({100 * saved / rows[i - 1].days:.0f} %) | "
                        f"{(r.cost_usd - rows[i - 1].cost_usd) / saved / 1e3:,.0f}")
        else:
            marginal = "- | -"
        lines.append(
            f"| {r.num_gpus} | {recomputed_layers(plan)} of 4 | {r.memory_per_gpu_GB:.1f} | "
            f"{r.step_time_ideal_s:.2f} / {r.step_time_mean_s:.2f} / "
            f"{r.step_time_p99_s:.2f} | {r.days:.1f} ({mc['days_p10']:.1f}-{mc['days_p90']:.1f})"
            f" | {r.gpu_hours / 1e6:.2f} M | {r.cost_usd / 1e6:.1f} | {r.interruptions:.0f} | "
            f"{100 * r.goodput:.1f} % | {r.checkpoint['interval_s']:.0f} s | "
            f"{r.energy_MWh:,.0f} | {marginal} |")
    causes = ", ".join(f"{k} {v:.0f}" for k, v in llama.interruptions_by_cause.items())
    return f"""# Time-to-train: stragglers, failures, checkpoints, goodput, energy, cost

Generated by `PYTHONPATH=$PWD python -m simulator.studies.time_to_train` (issue #14).
Rates, storage and power come from `topologies/dgx-h100.yaml` (`reliability`, `storage`,
`power`, each with its `sources`). The price, ${PRICE:.2f} per GPU-hour, is an input of this
report only; the code has no default price.

## Llama 3 405B on 16,384 H100 for ~54 days (the published case)

Tokens chosen so that the run lasts about 54 days: {llama.tokens / 1e12:.1f}T tokens,
{llama.days:.1f} days. Expected unexpected interruptions {llama.interruptions:.0f}
({causes}); published: 419 in 54 days (Llama 3 paper, Table 5; the rates are derived from
that table, so this checks the bookkeeping, not an independent prediction; Kokolis et al.
2024 report rates of the same order on Meta's A100 research clusters). Goodput (effective
training time ratio) {100 * llama.goodput:.1f} %; published: > 90 %. Checkpoint
{llama.checkpoint['size_GB']:.0f} GB (14 B per parameter), written in
{llama.checkpoint['write_s']:.1f} s at 2 TB/s, every {llama.checkpoint['interval_s']:.0f} s
(Daly's optimum for an MTBF of {llama.mtbf_hours:.2f} h).

Memory: as modelled, this plan needs {llama.memory_per_gpu_GB:.1f} GB per GPU, more than
an H100 holds, although the paper trained it without activation checkpointing. The paper
shards the optimizer state and the gradients FSDP-style; the shipped plan shards the
optimizer state only (Megatron's distributed optimizer). Sharding the gradients as
Megatron-FSDP does (`training.use_megatron_fsdp`, `data_parallel_sharding_strategy:
optim_grads`) makes it fit ({zero2.memory_per_gpu_GB:.1f} GB), but that reduce-scatters
the fp32 gradients over the 128 data-parallel ranks after every micro-batch, which exposes
{zero2_dp_s:.1f} s per step ({100 * zero2.mfu:.1f} % MFU). The paper does not say how
it accumulated gradients, nor the depth of its interleaved schedule
(`workloads/llama3-405b.yaml`). The step time, failures and goodput above are those of
the plan as published.

## Time-to-train and cost against GPU count

Llama 3 405B, TP 8 x PP 16 (VP 2), global batch 2048 x 8K tokens, 15T tokens, DGX H100.
At each GPU count the plan recomputes the fewest layers per model chunk that make it fit
(Megatron `--recompute-method block`; without recompute it fits at none of these counts):
a time-to-train for a plan that cannot start would mean nothing.

{chr(10).join(lines)}

![time to train](figures/time_to_train.png)

Doubling the GPUs at a fixed global batch halves the micro-batches per pipeline, so the
bubble grows; the step's straggler tail grows with the peers that synchronise (the
expected maximum of N per-GPU draws); interruptions and restarts grow with the GPU count.
The days keep falling, but each doubling saves a smaller share (the ideal is 50 %) and
costs more per day saved: the last column is the price of a day. Where that price exceeds
what a day is worth to the planner, adding GPUs stops paying; a larger global batch (more
micro-batches) or a shallower pipeline moves that point out.

## Variability: the scale growth of weakly scaled dense jobs

`python -m simulator.validation.scale_fit` (run by this report); growth is the expected
step at the largest scale over the smallest, minus one; "held out" predicts each group with
constants fitted on all the other groups (leave-one-group-out). Three constants, one value
for every group, least squares on the growth: the per-GPU jitter sigma, the per-node host
noise once per step, and the per-replica barrier noise at each phase that ends in a
job-wide barrier. Only FP8 with delayed scaling has such barriers (the amax all-reduce over
the stage's TP x DP x CP group at every `fp8_autocast` exit, forward and backward, per chunk
and micro-batch: Megatron-Core's `get_amax_reduction_group(with_context_parallel=True)`; a
replica's TP ranks arrive together from the chunk's last TP collective, so the arrivals
that can be late are its DP x CP replicas),
so it is what lets an FP8 job with many short chunks grow more than the same job in BF16
without an FP8-only sigma.

The groups: the 16 of the step-time validation (`validation/dense_step_time*.yaml`:
dgxc-benchmarking 24.11 / 25.01 on H100, 25.05 on GB200), and 20 H100 groups of two later
dgxc-benchmarking releases, v25.02 (NeMo 24.12) and v25.04 (NeMo 25.02.01), each with its
own recipe (`validation/scaling/`, README there). The later ones stay out of the step-time
validation: their absolute step reflects software the compute constants were not fitted
on; their growth with scale is what they are here for.

{fit_table}

**Reading it.** 31 of the 36 groups are within 2 pp held out: 19 of the 20 later-release
groups and 12 of the 16 validation groups (the same count as the fit on the 16 alone).
Before any variability, every group that grows by +4 % or more was outside.

**Replicates.** Fourteen pairs of groups run the same model, precision and plan over the
same GPU counts in two releases. Their measured growths differ by a median of 1.5 pp, and
by up to 8.1 pp. A model predicts one growth for both members of a pair, so a spread
near 2 x 2 pp is what the 2 pp bar leaves room for. Read as noise on each measurement
(the last line under the table), a model that got every expected growth exactly right
would still leave about 2 to 10 of the 36 groups outside 2 pp; this one leaves 5. The
H100 points are single steps:
- the 24.11 READMEs take "the last training step timing" of a 50-step run;
- v25.04 logs the last step too (NeMo's `TimingCallback` with no buffer);
- v25.02 averages the last 5 steps for GPT-3, Llama 3.1 405B and Nemotron-4 15B only
  (`step_timing_kwargs.buffer_size: 5`);
- the GB200 points are means of iterations 11-44.

**The five outside.**
- *Llama 3.1 405B FP8, 24.11* (-8.2 pp). It grows +0.6 % from 576 to 1,152 GPUs and then
  +9.2 % to 2,304, while its BF16 twin grows +2.4 % in all. Its v25.02 rerun (same model,
  plan and GPU counts; NeMo 24.12) grows +1.8 %, which the fit matches within 0.1 pp.
- *GPT-3 175B FP8, 24.11* (+6.5 pp). It grows +13.5 % at 1,024 GPUs and then +5.4 % at
  2,048 (5.92, 5.96, 6.44, 6.72, 6.24 s). No model whose expected step rises with the GPU
  count can follow both points. The v25.02 series (VP 6 instead of 12) is smooth (+5.9 %)
  and within 0.6 pp.
- *Nemotron-4 340B, 24.11, BF16 and FP8* (-2.9 and -5.7 pp). Both series are smooth and
  grow about twice the fit (+5.0 % and +10.4 %). The v25.04 runs (256 to 2,048 GPUs;
  another recipe: no recompute, fp32 optimizer state, Megatron-Core's distributed
  optimizer) grow +1.6 % and +4.1 %, within 0.1 pp. Over the same 256 to 2,048 GPUs the
  24.11 runs grow +3.6 % and +8.7 %. That points at the older stack or cluster, not at a
  cost of scale the newer runs also pay.
- *Llama 3.1 70B BF16, v25.04* (+2.1 pp). It measures no growth at all (14.66 s at 64 and
  at 2,048 GPUs), where its 24.11 and v25.02 replicates grew +1.8 % and +1.6 %.

tests/test_reliability_scale.py lists the five with these reasons, and checks the
replicate statements.

### Candidate missing effects

`python -m simulator.validation.scale_probe` (run by this report) adds one candidate effect
at a time to the expected step of each group end, fits its parameter theta (where it has
one) with the three constants, and predicts each group held out as above; the module
docstring gives each effect's formula.

{probe_table}

* **Optimizer floor.** The model's optimizer step is 30 B per local parameter at HBM
  bandwidth plus one kernel launch (4 us); sharded over DP it falls from 29.1 to 1.8 ms on
  Nemotron-4 340B H100 (DP 2 -> 32) while the overlap slowdown charged for the gradient
  buckets grows from 24 to 44 ms. A floor ``max(F, step)`` does not help: even F = 30 ms,
  far above any launch cost, moves that group only from -2.9 to -2.7 pp.
* **Overlap slowdown on all hidden DP traffic.** The engine slows the compute by the
  sourced `comm_overlap_slowdown` (0.18) for the gradient buckets beside the backward, but
  not for the parameter all-gather hidden under the next forwards (340B: 119 -> 230 ms).
  Charging it (nothing fitted) moves 340B BF16 to -2.6 pp; also adding the DP stream's own
  tail past the pipeline end pushes Nemotron-4 15B v25.02 outside (+2.1 pp). One slowdown
  for all hidden DP traffic, fitted within the measured range 0.18-0.40 (mean 18.9 %, max
  40 %: Hong et al. 2025, arXiv:2507.03114), goes to the top of that range, 0.40. It brings
  340B BF16 inside (-1.9 pp) but pushes Nemotron-4 15B v25.02 just outside (+2.0 pp), and
  the mean held-out error rises from 1.30 to 1.38 pp. It is an engine change that moves
  every validation number, trading one group at the edge of the bar for another, with the
  measured maximum used as the typical value. Not adopted.
* **Exposed DP time.** A fraction theta of the DP wire time per step on top of the engine,
  which grows as a ring's (n-1)/n at fixed work per GPU (340B H100: 0.26 -> 0.50 s of a
  4.4 s step). Fitted freely (theta = 0.65), it brings 340B BF16 (-0.6 pp) and Llama 3.1
  70B BF16 v25.04 inside but pushes three out: Nemotron-4 340B GB200 BF16 (+2.1 pp) and
  both Nemotron-4 15B groups it touches (v25.02 BF16 +2.2 pp, v25.04 FP8 -2.2 pp): 30 of
  36. Set to the topology's `comm_overlap_slowdown` (0.18, not fitted), it brings no group
  inside (340B BF16 -2.4 pp) and pushes Nemotron-4 15B v25.02 out (+2.0 pp); it also
  charges the buckets' slowdown a second time. Not adopted.
* **NIC shared by PP sends and DP collectives** (one 400 Gb/s NIC per GPU on DGX H100; the
  engine gives each its own link). Doubling every p2p time costs 340B 77-78 ms per step
  and DP traffic fills 6 -> 11 % of the step, so even this upper bound changes no group.
* **Spine.** The 340B DP group (32 ranks, one per node) stays inside one 32-node scalable
  unit even at 2,048 GPUs; only the pipeline sends cross the non-blocking spine. The fit
  would want them 2.4x slower there (theta = 1.4). That brings 340B BF16 inside but pushes
  both v25.04 Nemotron-4 340B groups outside (+2.6 and +3.6 pp): the same model on the same
  spine, in a later release, does not grow that way.

* **Slow nodes.** Persistent stragglers that health checks miss: each node slow with
  probability f, then 1 + d times slower, and one slow node paces the whole step, so the
  expected step gains (1 - (1 - f)^J) d per job of J nodes. It saturates with the node
  count where the jitter keeps growing, and it is the one candidate that would also explain
  why two runs of the same job disagree (one drew a slow node). Fitted on a grid (f from
  1e-4 to 5e-3 per node, d from 2 to 15 %), it goes to f = 3e-4 and d = 0.15, the top of
  the grid, brings no group inside and pushes Llama 3.1 8B v25.02 outside (mean error 1.41
  pp). Not adopted; `reliability.slow_node_fraction` stays 0 for these health-checked
  clusters.

* **Barrier wait that grows with the time since the last barrier.** The shipped model
  charges each FP8 amax barrier a constant host-side delay, so a pipeline with twice the
  chunks pays twice the waits: GPT-3 175B FP8 24.11 (VP 12) is predicted to grow +11.3 %
  where it grew +5.4 %, while the same model at VP 6 (v25.02) is predicted right. If
  instead each replica drifts while it computes and the barrier waits for the most
  drifted one, the waits scale with the phase (proportional) or its square root (random
  walk) and a deeper interleave costs the same or sqrt 2 times as much. Replacing the
  constant delay (sync_noise_s held at 0), the random walk fits theta = 0.003 s^0.5 and
  brings GPT-3 FP8 24.11 inside (+1.9 pp), but pushes Llama 3.1 405B GB200 FP8 (+2.2 pp) and
  Llama 3.1 70B FP8 v25.04 out: 30 of 36 (mean error 1.26 pp), 12 of the 16 validation
  groups as now. The proportional form fits 0.019 and does worse (27 of 36). Nor does the
  random walk lower the absolute waits where the step is over-predicted: fitted on growth,
  it charges every FP8 validation case more than the constant delay does (GPT-3 175B FP8
  at 2,048 GPUs: 13.5 % of the step against 12.3 %; Llama 3.1 405B FP8 at 2,304: 6.6 %
  against 3.0 %). Not adopted.

One candidate brings a group inside without pushing another out: the DP-overlap
slowdown at the top of its measured range (0.40) brings Nemotron-4 340B BF16 24.11
inside (since the logits GEMM runs in bf16 and the FP8 constants were refitted,
2026-12-02); no other raises the count. One group, at the edge of the candidate's
range, does not identify the effect, so it is not in the model, and the shipped
constants are the three-constant fit above (tests/test_reliability_scale.py checks both
statements).

### The spread of single steps: two published runs

The fit above sets the constants from the growth of the mean step only; the Monte-Carlo's
spread of single steps around it (behind `step_time_p50_s` / `step_time_p99_s`) is a
prediction. dgxc-benchmarking prints, for a few real jobs, the mean and the standard
deviation of the step over iterations 11-44 (`validation/step_spread/`);
`python -m simulator.validation.step_spread` simulates the same model, plan and GPUs
(200 seeded steps):

{spread_table}

The model's standard deviation is within a factor of 1.6 of the measured one in both
runs (0.12 % vs 0.19 % of the step for Llama 3.1 405B BF16, 0.06 % vs 0.05 % for Nemotron-4
340B FP8 with 128 micro-batches per step, whose phase jitter averages out). A sample
standard deviation over 34 steps carries a standard error of about 12 %.
tests/test_reliability_spread.py holds the ratio within a factor of 2.

The plain `simulate()` / `clustersim run` step is the expected step (deterministic; its
`step_time_p50_s` and `step_time_p99_s` equal `step_time_s` until `run --variability` draws
them), and so is every step of the validation, sweeps and search: the compute constants are
fitted against it (docs/architecture.md, item 8). `run --ideal` gives the step without the
waits. `simulator.reliability.run.simulate_with_variability` and `time-to-train` add the
Monte-Carlo percentiles. Over the validation cases the waits cost +2 to +7 % of the step in
BF16 and up to +18 % in FP8 with many short chunks (GPT-3 175B FP8, VP 12, 1,536 amax
barriers per step, at 2,048 GPUs).

## Model, in one paragraph each

* **Variability** (`simulator/metrics/variability.py`): per-GPU log-normal phase jitter,
  the maximum over the stage's TP x CP x DP peers drawn from its distribution; slow nodes;
  per-node host noise, the step waits for the largest; under FP8 delayed scaling every
  phase ends at the amax all-reduce, which waits for the latest of its DP x CP replicas
  (exponential arrival delays, expected maximum ``sync_noise_s * H_n``; the TP ranks of a
  replica arrive together from their last TP collective). Replayed through the public
  `EngineInput`; zero constants give the engine's step bit for bit.
* **Failures** (`failures.py`): Poisson interruptions per GPU, node, link and job (software);
  Daly's (2006) optimal interval and expected wall time; Monte-Carlo runs for p10/p90.
* **Checkpoint** (`checkpoint.py`): 14 B per unique parameter, from the per-stage counts of
  `simulator.shape.params`; write/read at the slower of node links and file system;
  `--async-save` blocks only for the device-to-host copy.
* **Energy** (`energy.py`): GPUs at a fraction of TDP while computing, another while waiting;
  node rest and network per hour; facility energy x PUE.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "reports"))
    ap.add_argument("--fit-table", default=None,
                    help="markdown table from scale_fit to embed (default: run the fit, ~2 min)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    pts = points()
    rows = [r for _, r in pts]
    base = time_to_train("llama3-405b", "dgx-h100", 1e12, mc_runs=5, mc_steps=4)
    llama = time_to_train("llama3-405b", "dgx-h100", 1e12 * 54 / base.days, mc_runs=100,
                          mc_steps=16, price_per_gpu_hour=PRICE)
    figure(rows, out / "figures" / "time_to_train.png")
    groups = scale_groups()
    table = (Path(args.fit_table).read_text() if args.fit_table else render(fit(groups), groups))
    probe = render_probe(run_all(groups))
    spread = render_spread(spreads())
    zero2 = simulate("llama3-405b", "dgx-h100", overrides=ZERO2)
    atomic_write_text(out / "time_to_train.md",
                      markdown(pts, table, llama, probe, spread, zero2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
