"""Long-context study: Llama 2 7B from 4K to 1M tokens with and without context parallelism.

Reproduces the *direction and size* of NVIDIA's published NeMo long-sequence
measurements on H100 (FP8, constant ~4M tokens per global batch): without CP
throughput collapses from 768 TFLOP/s/GPU at 4K to 26.5 at 1M tokens, while
with CP (32 at 1M) it holds 536-610. Writes ``reports/context_parallel.md``.

    python -m simulator.studies.long_context
"""

from __future__ import annotations

from pathlib import Path

from ..api import simulate
from ..errors import ConfigError
from ..io import atomic_write_text

LLAMA2_7B = {
    "model": {"name": "llama2-7b", "num_layers": 32, "hidden_size": 4096,
              "num_attention_heads": 32, "ffn_hidden_size": 11008, "gated_linear_unit": True,
              "vocab_size": 32000, "seq_length": 4096, "hidden_dropout": 0.0,
              "attention_dropout": 0.0, "untie_embeddings_and_output_weights": True},
    "parallelism": {"tensor": 4, "sequence_parallel": True},
    "training": {"global_batch_size": 1024, "micro_batch_size": 1, "precision": "fp8",
                 "tp_comm_overlap": True, "recompute": "selective"},
}
TOKENS_PER_BATCH = 4 * 1024 * 1024
SEQS = [4096, 16384, 65536, 131072, 262144, 524288, 1048576]
MEASURED = {4096: (768, None), 1048576: (26.5, (536, 610))}
OUT = Path(__file__).resolve().parents[2] / "reports" / "context_parallel.md"


def run_point(seq: int, cp: int, algo: str = "ring_zigzag", topology: str = "dgx-h100"):
    gbs = max(1, TOKENS_PER_BATCH // seq)
    dp = max(1, min(8, gbs))
    over = {"model.seq_length": seq, "parallelism.context": cp, "parallelism.data": dp,
            "training.global_batch_size": gbs, "parallelism.context_parallel_algo": algo}
    try:
        return simulate(LLAMA2_7B, topology, **over)
    except ConfigError as exc:
        return exc


def causal_share(seq: int) -> float:
    """Model FLOPs with causal attention (half the square) over the unmasked convention."""
    m = LLAMA2_7B["model"]
    h, L, f, V = m["hidden_size"], m["num_layers"], m["ffn_hidden_size"], m["vocab_size"]
    dense = L * (2 * seq * h * 4 * h + 2 * seq * h * f * 3) + 2 * seq * h * V
    attn = L * 4 * seq * seq * h
    return (dense + attn / 2) / (dense + attn)


def _cell(r, seq: int) -> str:
    if isinstance(r, ConfigError):
        return f"invalid ({r.allowed[:40]})"
    fit = "" if r.fits_in_memory else f", needs {r.memory_per_gpu_GB:.0f} GB: does not fit"
    causal = r.model_tflops_per_gpu * causal_share(seq)
    return (f"{r.model_tflops_per_gpu:.0f} ({causal:.0f} causal) TFLOP/s, "
            f"cp comm {r.exposed_comm_s['cp']:.2f} s{fit}")


def main() -> None:
    first = run_point(SEQS[0], 1)
    at_4k = "n/a" if isinstance(first, ConfigError) else f"{first.model_tflops_per_gpu:.0f}"
    rows = ["| seq | no CP (TP4) | CP degree | with CP, zigzag ring | with CP, contiguous ring "
            "| published (no CP / CP) |", "|---:|---|---:|---|---|---|"]
    for seq in SEQS:
        cp = max(1, seq // 32768)
        base = run_point(seq, 1)
        zig = run_point(seq, cp)
        ring = run_point(seq, cp, "ring")
        meas = MEASURED.get(seq)
        pub = "" if meas is None else f"{meas[0]} / {meas[1] or '-'}"
        rows.append(f"| {seq:,} | {_cell(base, seq)} | {cp} | {_cell(zig, seq)} | "
                    f"{_cell(ring, seq)} | {pub} |")
    text = "\n".join([
        "# Context parallelism: Llama 2 7B, 4K to 1M tokens (simulated, DGX H100, FP8)",
        "",
        "Regenerate: `python -m simulator.studies.long_context`. Constant ~4M tokens per "
        "global batch, TP4 with sequence parallelism, selective recompute, up to DP8; CP degree "
        "= seq / 32K (32 at 1M, as in NVIDIA's table). TFLOP/s/GPU count model FLOPs with "
        "attention unmasked (the convention of NVIDIA's dgxc tables); in brackets the same "
        "throughput counting causal attention as half the square, since at 1M tokens the "
        "convention alone changes the figure by almost 2x.",
        "",
        *rows,
        "",
        "## Against the published measurements (NeMo long-sequence tables, H100, FP8)",
        "",
        "- **Direction reproduced.** Without CP a 1M-token sequence puts the whole sequence's "
        "activations on each TP group: the simulator reports the plan as not fitting in 80 GB "
        "long before 1M tokens, and its attention time grows as s^2 on one group while "
        "everything else stays linear. With CP the per-GPU sequence stays at 32K, the plan "
        "fits, and throughput stays within a few percent of the 4K-32K figures because the "
        "zigzag ring hides the KV transfers behind attention compute.",
        f"- **Size.** At 4K our {at_4k} TFLOP/s is below the published 768 because this study "
        "keeps the long-sequence plan (TP4) at every length; a 7B model at 4K runs best "
        "with little or no TP (see `clustersim search`). The published no-CP point at 1M "
        "(26.5 TFLOP/s) is a run that only works "
        "with activation offloading / extreme recompute; this study's plan offloads nothing "
        "and keeps selective recompute, so it answers 'does not fit' there (`training."
        "cpu_offloading` and full recompute are modelled and can be swept). With CP at "
        "1M the published 536-610 sits between our causal-counted and unmasked-counted "
        "figures: the table does not say which convention it uses, and our FP8 constants are "
        "fitted on 2K-8K-token runs (reports/validation.md), where attention is a small "
        "share; at 1M tokens attention is over 95 % of the FLOPs, so this row mostly tests "
        "the attention efficiency, a single constant across sequence lengths here.",
        "- **Contiguous vs zigzag.** With a contiguous causal split the last CP rank does "
        "(2p-1)/p times the mean attention work (1.97x at p=32); the simulator shows the "
        "resulting slowdown, which zigzag removes (imbalance.cp = 1.0).",
        "",
    ])
    atomic_write_text(OUT, text)
    print(text)


if __name__ == "__main__":
    main()
