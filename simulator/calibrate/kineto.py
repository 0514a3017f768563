"""PyTorch profiler (Kineto) trace JSON: GPU kernel time per step, mapped to op kinds.

A Kineto trace (``torch.profiler`` ``export_chrome_trace``) is Chrome trace-event JSON: GPU
kernels are complete events (``"ph": "X"``) of category ``kernel`` with ``dur`` in
microseconds; the steps are ``ProfilerStep#N`` CPU annotations. Kernel names map to the
simulator's op kinds by :func:`kind_of` (first match wins): NCCL / RCCL kernels to ``comm``,
flash / fused attention to ``attention``, cuBLAS / CUTLASS / hipBLASLt GEMMs to ``gemm``,
elementwise, normalisation, softmax, optimizer and copy kernels to ``memory``.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from ..errors import ConfigError
from .measurements import TraceProfile

MAX_BYTES = 2_000_000_000
KERNEL_CATS = {"kernel", "gpu_kernel", "cuda_kernel"}
# (kind, pattern) in order: attention before gemm (cuDNN / FA3 attention kernels contain
# "wgmma" / "cutlass"), comm first (NCCL kernel names contain "Reduce" / "Gather")
RULES = (
    ("comm", r"nccl|rccl|msccl|allreduce|all_reduce|reducescatter|allgather|alltoall|"
             r"sendrecv|cross_device_reduce|deep_ep|deepep"),
    ("attention", r"flash|fmha|fused_attn|_attn|attn_|attention|sdpa|\bmha\b|_mha|"
                  r"cudnn.*(?:fprop|bprop|sdpa)"),
    ("gemm", r"gemm|cutlass|nvjet|xmma|wgmma|hgmma|cublas|hipblaslt|cijk_|triton_tem|"
             r"matmul|_mm_|splitk|\bmm\b|bmm|ampere_.*[sh]\d+|sm\d+_.*tensorop"),
    ("memory", r"elementwise|vectorized|norm|softmax|reduce|reduction|copy|cat|index|"
               r"embedding|dropout|gelu|silu|swiglu|swish|adam|multi_tensor|optimizer|fill|"
               r"cast|transpose|rotary|rope|triton_(?:poi|red|per)|arange|where|mul|add|"
               r"amax|scale|quantize|memcpy|memset|scatter|gather|sort|topk|unique|cumsum|"
               r"permute|unpermute|pad|bias|act|relu|exp|sum|mean|max|min|kernel_fused|"
               r"distribution|random|philox|loss|cross_entropy|clamp|div|sub|neg|sqrt|pow"),
)
_RULES = tuple((k, re.compile(p, re.IGNORECASE)) for k, p in RULES)
KINDS = ("gemm", "attention", "comm", "memory")


def kind_of(name: str) -> str | None:
    """The op kind of a kernel name, or None when no rule matches."""
    for kind, pattern in _RULES:
        if pattern.search(name):
            return kind
    return None


def looks_like(text_head: str) -> bool:
    return text_head.lstrip().startswith(("{", "[")) and "traceEvents" in text_head


def read(path: Path) -> str:
    """A trace's text (``.gz`` decompressed), refusing files over MAX_BYTES."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError("measurements", str(path), f"cannot be read: {exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError("measurements", str(path), "trace larger than 2 GB")
    return raw.decode("utf-8", errors="replace")


def parse(path: str | Path, text: str) -> TraceProfile:
    name = str(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("trace", name, f"is not JSON: {exc.msg}",
                          source=f"{name}:{exc.lineno}") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ConfigError("traceEvents", None, "a Kineto trace is a JSON object with a "
                          "traceEvents list", source=f"{name}:1")
    kernels = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
               and str(e.get("cat", "")).lower() in KERNEL_CATS]
    if not kernels:
        raise ConfigError("traceEvents", f"{len(events)} events", "no GPU kernels (events of "
                          "category 'kernel'): profile with activities=[ProfilerActivity.CUDA]",
                          source=f"{name}:1")
    steps = sum(1 for e in events if isinstance(e, dict) and e.get("ph") == "X"
                and str(e.get("name", "")).startswith("ProfilerStep#")) or 1
    kind_s = dict.fromkeys(KINDS, 0.0)
    unmapped: dict[str, float] = {}
    for e in kernels:
        dur = float(e.get("dur", 0.0)) * 1e-6 / steps
        kind = kind_of(str(e.get("name", "")))
        if kind is None:
            unmapped[str(e.get("name", ""))] = unmapped.get(str(e.get("name", "")), 0.0) + dur
        else:
            kind_s[kind] += dur
    return TraceProfile(where=name, steps=steps, kind_s=kind_s, unmapped_s=unmapped)
