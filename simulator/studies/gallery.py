"""The figure gallery of the shipped examples: ``reports/figures/*.png`` and ``reports/README.md``.

Regenerate everything with one command (about half a minute on a laptop)::

    python -m simulator.studies.gallery          # or: clustersim plot gallery

Each entry of :data:`GALLERY` names a file, a caption and a function that
simulates what it needs and returns a figure. The README is written from the
same entries, with the headline numbers of every simulated configuration, so
the text never disagrees with the pictures. Figures that need a feature the
simulator lacks are listed under "not shown" with the reason.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import load_workload
from ..io import atomic_write
from ..report.breakdown import breakdown_figure
from ..report.expert_load import expert_load_figure_for
from ..report.figures import SimRun, close, plan_label, save_figure, simulate_run
from ..report.memory_plot import memory_figure_for
from ..report.scaling import scaling_figure
from ..report.timeline import timeline_figure

COMMAND = "python -m simulator.studies.gallery"
SMALL_BATCH = {"training.global_batch_size": 16}  # 8 micro-batches: readable timelines
ONE_F_ONE_B = {"parallelism.pipeline_schedule": "1f1b", "parallelism.virtual_pipeline": None}
UNIFORM = {"model.moe.router_load": "uniform"}
SKEWED = {"model.moe.router_load": "skewed", "model.moe.router_skew": 1.0,
          "model.moe.balancing": "none"}


@dataclass
class Entry:
    """One gallery figure: ``build(log)`` returns it and appends its runs to ``log``."""

    name: str
    title: str
    caption: str
    build: Callable[[list[SimRun]], Any]
    runs: list[SimRun] = field(default_factory=list)
    text: Callable[[], list[str]] | None = None  # extra README lines, after build


def _runs(log: list[SimRun], specs: list[tuple[str, str, dict, str]]) -> list[SimRun]:
    out = [simulate_run(w, t, ov, label=label) for w, t, ov, label in specs]
    log.extend(out)
    return out


def _breakdown(specs: list[tuple[str, str, dict, str]], title: str):
    """Bars labelled by their spec; ``{plan}`` in a label is the plan actually simulated
    (degrees and schedule read from the result, so a label cannot name the wrong one)."""
    def build(log: list[SimRun]):
        runs = _runs(log, specs)
        for r in runs:
            r.label = r.label.replace("{plan}", plan_label(r.result.plan, "\n"))
        return breakdown_figure([r.result for r in runs], title=title,
                                labels=[r.label for r in runs])
    return build


def _timeline(workload: str, topology: str, ov: dict[str, Any]):
    def build(log: list[SimRun]):
        (run,) = _runs(log, [(workload, topology, ov, "")])
        run.label = plan_label(run.result.plan)
        return timeline_figure(run.plan, run.engine, run.result)
    return build


def _memory(workload: str, topology: str, ov: dict[str, Any]):
    def build(log: list[SimRun]):
        (run,) = _runs(log, [(workload, topology, ov, "")])
        run.label = f"{plan_label(run.result.plan)}, recompute {run.result.plan['recompute']}"
        return memory_figure_for(run)
    return build


def _expert(workload: str, ov: dict[str, Any]):
    def build(log: list[SimRun]):
        return expert_load_figure_for(load_workload(workload, ov))
    return build


def _scaling(log: list[SimRun]):
    """Llama 3 70B, TP8 PP4 interleaved, 512 sequences per step, DP 1..32, three systems."""
    rows = []
    for topo in ("dgx-a100", "dgx-h100", "gb200-nvl72"):
        for dp in (1, 2, 4, 8, 16, 32):
            ov = {"parallelism.data": dp, "training.global_batch_size": 512}
            r = simulate_run("llama3-70b", topo, ov).result
            rows.append({"label": topo, "num_gpus": r.num_gpus, "tokens_per_s": r.tokens_per_s,
                         "mfu": r.mfu, "workload": r.workload})
    return scaling_figure(pd.DataFrame(rows), title="Scaling: llama3-70b, TP8 PP4 VP5 "
                          "interleaved, 512 x 8K sequences per step, DP 1 to 32")


# Llama 3.1 405B in FP8 (current scaling) on 256 GPUs as Megatron-Bridge's 26.x performance
# recipes run it (validation/megatron_bridge/gb200.yaml, validation/dense_step_time_gb300.yaml)
FP8_405B = {"parallelism.tensor": 4, "parallelism.pipeline": 16, "parallelism.data": 4,
            "parallelism.virtual_pipeline": 4,
            "parallelism.account_for_embedding_in_pipeline_split": True,
            "parallelism.account_for_loss_in_pipeline_split": True,
            "training.global_batch_size": 1536, "training.precision": "fp8",
            "training.fp8_recipe": "tensorwise", "training.fp8_param_gather": True,
            "training.grad_reduce_in_fp32": False,
            "training.cross_entropy_loss_fusion": True,
            "training.cross_entropy_fusion_impl": "te"}
GB300_PLAN = {"parallelism.pipeline": 8, "parallelism.data": 8}


class _Capacity:
    """``clustersim capacity`` on the issue-32 grid: the figure, then its frontier table."""

    def __init__(self) -> None:
        self.df: Any = None
        self.ARGS = {"prices": {"dgx-h100": 2.5, "gb200-nvl72": 4.0}, "deadline_days": 30.0,
                     "budget_usd": 2.0e6}

    def __call__(self, log: list[SimRun]):
        from ..capacity import capacity
        from ..report.capacity_plot import capacity_figure

        self.df = capacity("llama3-70b", 2e12, ["dgx-h100", "gb200-nvl72"],
                           [256, 1024, 4096], **self.ARGS)
        return capacity_figure(self.df, self.ARGS["deadline_days"], self.ARGS["budget_usd"],
                               "Llama 3 70B on 2T tokens: days against cost, "
                               "USD 2.5 / 4.0 per GPU-hour")

    def text(self) -> list[str]:
        from ..report.capacity_plot import frontier_table

        return ["The frontier (`clustersim capacity llama3-70b --tokens 2e12 --topology "
                "dgx-h100,gb200-nvl72 --gpus 256,1024,4096 --price dgx-h100=2.5,"
                "gb200-nvl72=4.0 --deadline-days 30 --budget 2e6`):", "",
                *frontier_table(self.df), "", self.df.attrs["summary"] + "."]


_CAPACITY = _Capacity()

GALLERY: list[Entry] = [
    Entry("breakdown-llama3-405b-h100-vs-gb200.png", "Llama 3 405B: DGX H100 vs GB200 NVL72",
          "Llama 3 405B on DGX H100 and GB200 NVL72: the Llama 3 paper's TP8 PP16 DP128 plan "
          "on both, and on NVL72 a plan with half the pipeline stages (interleaved, VP2).",
          _breakdown([("llama3-405b", "dgx-h100", {}, "DGX H100\n{plan}"),
                      ("llama3-405b", "gb200-nvl72", {}, "GB200 NVL72\n{plan}"),
                      ("llama3-405b", "gb200-nvl72",
                       {"parallelism.pipeline": 8, "parallelism.data": 256,
                        "parallelism.pipeline_schedule": "interleaved",
                        "parallelism.virtual_pipeline": 2},
                       "GB200 NVL72\n{plan}")],
                     "Step-time breakdown: llama3-405b, 16,384 GPUs")),
    Entry("breakdown-llama31-405b-fp8-gb200-vs-gb300.png",
          "Llama 3.1 405B FP8: GB200 vs GB300 NVL72",
          "Llama 3.1 405B in FP8 (current scaling) on 256 GPUs, GBS 1536: GB200 NVL72 with its "
          "Megatron-Bridge recipe (TP4 PP16 VP4), GB300 NVL72 on the same plan, and GB300 with "
          "its own recipe (TP4 PP8 VP4): how much of the gain is the GPU and how much the plan "
          "its 288 GB allow.",
          _breakdown([("llama3-405b", "gb200-nvl72", FP8_405B, "GB200 NVL72\n{plan}"),
                      ("llama3-405b", "gb300-nvl72", FP8_405B, "GB300 NVL72\n{plan}"),
                      ("llama3-405b", "gb300-nvl72", {**FP8_405B, **GB300_PLAN},
                       "GB300 NVL72\n{plan}")],
                     "Step-time breakdown: llama3.1-405b FP8, 256 GPUs")),
    Entry("breakdown-llama3-70b-schedules.png", "Llama 3 70B: three pipeline schedules",
          "Llama 3 70B on 64 H100 (TP8 PP4 DP2, 64 micro-batches): the same step under "
          "GPipe, 1F1B and interleaved 1F1B with 5 chunks per stage.",
          _breakdown([("llama3-70b", "dgx-h100", {**ONE_F_ONE_B,
                                                  "parallelism.pipeline_schedule": "gpipe"},
                       "GPipe"),
                      ("llama3-70b", "dgx-h100", ONE_F_ONE_B, "1F1B"),
                      ("llama3-70b", "dgx-h100", {}, "interleaved\nVP5")],
                     "Step-time breakdown: llama3-70b on dgx-h100, TP8 PP4 DP2")),
    Entry("timeline-llama3-70b-gpipe.png", "Timeline: GPipe",
          "GPipe, 8 micro-batches: all forwards, then all backwards.",
          _timeline("llama3-70b", "dgx-h100",
                    {**SMALL_BATCH, **ONE_F_ONE_B, "parallelism.pipeline_schedule": "gpipe"})),
    Entry("timeline-llama3-70b-1f1b.png", "Timeline: 1F1B",
          "1F1B, 8 micro-batches: warm-up, one forward one backward, drain; same bubble as "
          "GPipe, fewer activations in flight.",
          _timeline("llama3-70b", "dgx-h100", {**SMALL_BATCH, **ONE_F_ONE_B})),
    Entry("timeline-llama3-70b-interleaved.png", "Timeline: interleaved 1F1B",
          "Interleaved 1F1B, 8 micro-batches, 2 chunks per stage (lighter: second chunk): "
          "the bubble shrinks by the number of chunks, at twice the p2p traffic.",
          _timeline("llama3-70b", "dgx-h100",
                    {**SMALL_BATCH, "parallelism.virtual_pipeline": 2})),
    Entry("memory-llama3-405b-dgx-h100.png", "Memory: Llama 3 405B on H100",
          "Llama 3 405B on H100 without recomputation. Under 1F1B stage s keeps p - s "
          "micro-batches of activations in flight, so the early stages need the most.",
          _memory("llama3-405b", "dgx-h100", {})),
    Entry("memory-llama3-405b-dgx-h100-full-recompute.png",
          "Memory: Llama 3 405B on H100, full recomputation",
          "The same plan with full activation recomputation: each stage keeps only the "
          "layer inputs, at the price of a second forward pass (see the step time).",
          _memory("llama3-405b", "dgx-h100", {"training.recompute": "full"})),
    Entry("scaling-llama3-70b.png", "Scaling: Llama 3 70B on three systems",
          "Throughput and MFU as data parallelism grows at a fixed 512 sequences per step: "
          "fewer micro-batches per replica, so the pipeline bubble grows.", _scaling),
    Entry("breakdown-llama3-8b-cp.png", "Context parallelism: contiguous vs zigzag ring",
          "Llama 3 8B at 64K tokens with CP4 DP8: contiguous ring attention leaves the "
          "last CP rank the most causal work; zigzag balances it; Ulysses all-to-all.",
          _breakdown([("llama3-8b", "dgx-h100",
                       {"model.seq_length": 65536, "parallelism.context": 4,
                        "parallelism.context_parallel_algo": algo}, label)
                      for algo, label in (("ring", "ring\n(contiguous)"),
                                          ("ring_zigzag", "ring\n(zigzag)"),
                                          ("ulysses", "Ulysses"))],
                     "Step-time breakdown: llama3-8b, 64K sequences, CP4 DP8 on dgx-h100")),
    Entry("breakdown-mixtral-8x7b-router.png", "MoE: uniform vs skewed router",
          "Mixtral 8x7B (EP8): a perfectly even router; the shipped workload's router "
          "(log-normal expert popularity, sigma 0.5, damped by the aux loss); and a "
          "strongly skewed one (sigma 1, no balancing). The busiest expert sets the pace.",
          _breakdown([("mixtral-8x7b", "dgx-h100", UNIFORM, "uniform"),
                      ("mixtral-8x7b", "dgx-h100", {}, "skew 0.5\naux loss"),
                      ("mixtral-8x7b", "dgx-h100", SKEWED, "skew 1\nno balancing")],
                     "Step-time breakdown: mixtral-8x7b on dgx-h100")),
    Entry("expert-load-mixtral-8x7b-uniform.png", "Expert load: uniform router",
          "Tokens per expert, uniform router: every expert gets the even share.",
          _expert("mixtral-8x7b", UNIFORM)),
    Entry("expert-load-mixtral-8x7b-skewed.png", "Expert load: skewed router",
          "Skewed router (sigma 1) with a capacity factor of 1.25: overflow is dropped.",
          _expert("mixtral-8x7b", {**SKEWED, "model.moe.capacity_factor": 1.25})),
    Entry("capacity-llama3-70b.png", "Capacity: days against cost, H100 vs GB200",
          "Llama 3 70B on 2T tokens, the fastest fitting plan on 256, 1,024 and 4,096 GPUs of "
          "DGX H100 and GB200 NVL72, each with its time-to-train (failures, checkpoints) and "
          "cost at the given price per GPU-hour; the staircase is the cost-time frontier, the "
          "dashed lines a 30-day deadline and a USD 2M budget (`clustersim capacity`, "
          "docs/capacity.md).", _CAPACITY, text=_CAPACITY.text),
]

NOT_SHOWN = [
    "No Perfetto trace is committed (tens of MB of JSON for a real model); make one with "
    "`clustersim trace llama3-70b --topology dgx-h100 -o step.json` and open it at "
    "https://ui.perfetto.dev.",
]


def build_gallery(out: Path = Path("reports"), entries: list[Entry] | None = None
                  ) -> list[Path]:
    """Write every figure under ``out/figures`` and ``out/README.md``; returns the paths."""
    (Path(out) / "figures").mkdir(parents=True, exist_ok=True)
    entries = GALLERY if entries is None else entries
    paths = []
    for e in entries:
        e.runs = []
        fig = e.build(e.runs)
        paths.append(save_figure(fig, out / "figures" / e.name))
        close(fig)
    text = readme(entries, _others(out, entries))
    paths.append(atomic_write(out / "README.md", lambda fh: fh.write(text), binary=False))
    return paths


def _others(out: Path, entries: list[Entry]) -> list[str]:
    """Pages and figures other commands wrote into ``out`` (e.g. the validation report)."""
    mine = {e.name for e in entries}
    pages = sorted(p.name for p in out.glob("*.md") if p.name != "README.md")
    figs = sorted(p.name for p in (out / "figures").glob("*.png") if p.name not in mine)
    return [f"[{n}]({n})" for n in pages] + [f"[figures/{n}](figures/{n})" for n in figs]


def readme(entries: list[Entry], others: list[str] | None = None) -> str:
    lines = ["# Figure gallery", "",
             "Figures of the shipped workloads and topologies, made by the simulator. "
             "Regenerate all of them (and this page) with:", "", "```sh", COMMAND,
             "# or: clustersim plot gallery", "```", "",
             "Each figure can be made on its own with `clustersim plot KIND` "
             "(`breakdown`, `timeline`, `memory`, `scaling`, `expert-load`; see "
             "`clustersim plot --help`), or from Python with the functions in "
             "`simulator.report`.", ""]
    for e in entries:
        lines += [f"## {e.title}", "", e.caption, "", f"![{e.title}](figures/{e.name})", ""]
        if e.runs:
            lines += [*_numbers(e.runs), ""]
        if e.text is not None:
            lines += [*e.text(), ""]
    lines += ["## Not shown", ""] + [f"- {n}" for n in NOT_SHOWN] + [""]
    if others:
        lines += ["## Other reports in this folder", "",
                  "Written by other commands (not by the gallery):", ""]
        lines += [f"- {o}" for o in others] + [""]
    return "\n".join(lines)


def _numbers(runs: list[SimRun]) -> list[str]:
    out = ["| configuration | GPUs | step time (s) | tokens/s | MFU | bubble | memory/GPU |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        r = run.result
        label = (run.label or plan_label(r.plan)).replace("\n", " ")
        out.append(f"| {r.workload} on {r.topology}, {label} | {r.num_gpus} | "
                   f"{r.step_time_s:.3f} | {r.tokens_per_s:,.0f} | {r.mfu * 100:.1f}% | "
                   f"{r.bubble_fraction * 100:.1f}% | {r.memory_per_gpu_GB:.1f} GB"
                   f"{'' if r.fits_in_memory else ' (does not fit)'} |")
    return out


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else Path("reports")
    for path in build_gallery(out):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
