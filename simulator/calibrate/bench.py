"""Kernel microbenchmarks on the local GPU (torch), written as the CSV ``calibrate`` reads.

GEMMs (``torch.matmul`` in bf16 / fp16; FP8 through ``torch._scaled_mm`` where the GPU and
torch build support it) over square and transformer-like shapes, and fused attention
(``torch.nn.functional.scaled_dot_product_attention``, forward and forward + backward, causal)
over sequence lengths. Each time is the median over ``iters`` calls timed with CUDA events
after ``warmup`` calls. Needs the ``bench`` extra (``pip install "clustersim[bench]"``); not
run in CI. The columns are :data:`simulator.calibrate.kernels.HEADER`.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..optional import require
from .kernels import HEADER

SQUARE = (256, 512, 1024, 2048, 4096, 8192)
# (m, n, k) of a Llama-3-8B-like layer at 4096 tokens per GPU, TP 1 and TP 8
LAYER = ((4096, 6144, 4096), (4096, 4096, 4096), (4096, 28672, 4096), (4096, 4096, 14336),
         (4096, 768, 4096), (4096, 3584, 4096), (4096, 4096, 1792))
ATTENTION = ((1, 32, 2048, 128), (1, 32, 4096, 128), (1, 32, 8192, 128), (2, 16, 4096, 128))


def torch_and_device() -> Any:
    torch = require("torch", "bench-kernels")
    if not torch.cuda.is_available():
        raise ConfigError("bench-kernels", "torch.cuda.is_available() = False",
                          "needs a GPU visible to torch (CUDA or ROCm build)")
    return torch


def median_seconds(torch: Any, fn: Callable[[], Any], iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def gemm_row(torch: Any, m: int, n: int, k: int, dtype: str, iters: int, warmup: int
             ) -> dict[str, Any] | None:
    if dtype == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return None
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,  # noqa: E731
                                      out_dtype=torch.bfloat16)
        try:
            fn()
        except RuntimeError:  # no FP8 tensor cores, or a layout this build refuses
            return None
    else:
        t = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        a, b = torch.randn(m, k, device="cuda", dtype=t), torch.randn(k, n, device="cuda", dtype=t)
        fn = lambda: torch.matmul(a, b)  # noqa: E731
    return {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype,
            "time": median_seconds(torch, fn, iters, warmup)}


def attention_row(torch: Any, b: int, h: int, s: int, d: int, kernel: str, iters: int,
                  warmup: int) -> dict[str, Any]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=kernel != "fwd") for _ in range(3))
    if kernel == "fwd":
        fn = lambda: sdpa(q, k, v, is_causal=True)  # noqa: E731
    else:
        grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        fn = lambda: sdpa(q, k, v, is_causal=True).backward(grad)  # noqa: E731
    return {"op": "attention", "batch": b, "heads": h, "seq": s, "head_dim": d,
            "causal": "true", "kernel": kernel,
            "time": median_seconds(torch, fn, iters, warmup)}


def run(dtypes: tuple[str, ...] = ("bf16", "fp8"), iters: int = 20, warmup: int = 5,
        quick: bool = False) -> list[dict[str, Any]]:
    torch = torch_and_device()
    device = torch.cuda.get_device_name(0)
    shapes = [(s, s, s) for s in (SQUARE[::2] if quick else SQUARE)] + list(LAYER[:2 if quick
                                                                              else None])
    rows = [r for dt in dtypes for m, n, k in shapes
            if (r := gemm_row(torch, m, n, k, dt, iters, warmup)) is not None]
    for b, h, s, d in ATTENTION[:2] if quick else ATTENTION:
        for kernel in ("fwd", "fwd_bwd"):
            rows.append(attention_row(torch, b, h, s, d, kernel, iters, warmup))
    return [{**r, "device": device} for r in rows]


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(HEADER), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c, "") for c in HEADER})
    return buf.getvalue()
