"""MoE token dispatchers compared: one model, each dispatcher, on H100 and GB200 NVL72.

For each (topology, dispatcher) the bar stacks the bottleneck stage's expert-parallel
seconds of one step (:attr:`simulator.metrics.Result.ep_breakdown_s`): exposed
dispatch + combine, expert GEMMs, permute + router, host launch stall; the marker is
the step time. The plans are the shipped ``deepseek-v3`` workload (the published
Megatron-Bridge H100 plan) on ``dgx-h100`` and, on ``gb200-nvl72``, the published
Megatron-Bridge GB200 plan (TP1 PP4 VP4 EP64 on 256 GPUs, GBS 4096).

Regenerate: ``python -m simulator.report.dispatchers [--out reports/figures/...]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..api import simulate
from .figures import new_figure, save_figure, wrap_title

DISPATCHERS = ("alltoall", "allgather", "flex")
PLANS = {
    "dgx-h100": {},
    "gb200-nvl72": {"parallelism.tensor": 1, "parallelism.pipeline": 4,
                    "parallelism.virtual_pipeline": 4, "parallelism.data": 64,
                    "parallelism.sequence_parallel": False,
                    # Megatron-Bridge's layout for PP 4 x VP 4 (validation/moe_step_time.yaml)
                    "parallelism.pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL",
                    "training.global_batch_size": 4096},
}
PARTS = (("exposed", "exposed dispatch + combine"), ("expert_gemm", "expert GEMMs"),
         ("local", "permute + router"), ("host_stall", "host launch stall"))
DEFAULT_OUT = Path("reports/figures/moe-dispatchers-deepseek-v3-h100-vs-gb200.png")


def dispatcher_rows(workload: str = "deepseek-v3") -> list[dict]:
    """One row per (topology, dispatcher): step time and the EP breakdown, seconds."""
    rows = []
    for topo, plan in PLANS.items():
        for kind in DISPATCHERS:
            r = simulate(workload, topo, **plan, **{"model.moe.token_dispatcher_type": kind})
            ep = r.ep_breakdown_s
            rows.append({"topology": topo, "dispatcher": kind, "step_time_s": r.step_time_s,
                         "exposed": ep["exposed"], "expert_gemm": ep["expert_gemm"],
                         "local": ep["permute"] + ep["router"],
                         "host_stall": ep["host_stall"], "gpus": r.num_gpus})
    return rows


def dispatcher_figure(rows: list[dict], title: str):
    fig, ax = new_figure(11.0, 4.6)
    ax = np.atleast_1d(ax)[0]
    labels = [f"{r['topology']}\n{r['dispatcher']} ({r['gpus']} GPUs)" for r in rows]
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for key, name in PARTS:
        vals = np.array([r[key] for r in rows])
        ax.bar(x, vals, bottom=bottom, label=name)
        bottom += vals
    ax.plot(x, [r["step_time_s"] for r in rows], "k_", markersize=28, mew=2, label="step time")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("seconds per step (bottleneck stage)")
    ax.set_title(wrap_title(title, 9.0))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="deepseek-v3")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    rows = dispatcher_rows(args.workload)
    fig = dispatcher_figure(rows, f"{args.workload}: MoE token dispatchers, H100 vs GB200 NVL72")
    save_figure(fig, args.out)
    for r in rows:
        print(f"{r['topology']:12s} {r['dispatcher']:9s} step {r['step_time_s']:7.2f} s  "
              f"exposed EP {r['exposed']:6.2f} s  experts {r['expert_gemm']:6.2f} s  "
              f"host stall {r['host_stall']:5.2f} s")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
