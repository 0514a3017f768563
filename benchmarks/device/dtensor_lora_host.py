"""Host cost of eager DTensor tensor parallelism with LoRA adapters, timed on one GPU.

A device check, not part of the test suite (it needs PyTorch and a CUDA GPU; ``--device
cpu --shapes tiny`` runs it anywhere as a smoke test). It asks one question about NeMo AutoModel's
pipelined LoRA rows (validation/stacks/nemo_automodel.yaml, ``automodel-lora-pp-llama-h100``):
does the CPU, not the GPU, set the pace of an eager Hugging-Face-style Llama 70B decoder layer
whose four projections are LoRA linears under DTensor tensor parallelism?

What runs: ``--layers`` decoder layers with one tensor-parallel rank's shapes of Llama 3.x 70B
at TP 2 (hidden 8192; 32 query and 4 KV heads of 128; the combined QKV projection's 5,120 and
the combined gate/up projection's 28,672 output columns; the down projection's 14,336 input
rows), micro-batch 1, ``--seq`` tokens, bf16. The layer follows the recipe's code path as
written in validation/stacks/nemo_automodel.yaml: Hugging Face RMSNorm (float32 upcast, eager),
rotate-half RoPE, SDPA causal attention (FlashAttention-2 kernels), SiLU(gate) * up, each of
the four projections a frozen linear plus a rank-16 adapter ``B(A(x) * scale)`` with dropout
0 after it, and activation checkpointing around the attention, the MLP and each norm
(non-reentrant ``checkpoint_wrapper``). Forward, then backward with the re-run forward.

Variants (same shapes, same kernels):
* ``plain``: ordinary tensors; the GPU-bound reference.
* ``plain+sync``: plus, before each attention call, the position-id check of Transformers'
  FlashAttention-2 path at batch 1 (``_is_packed_sequence``: an arange, a min, a difference,
  an abs-sum and a ``bool()`` that reads the result on the host), so the GPU queue drains once
  per attention call, forward and re-run.
* ``dtensor``: the projections' weights and adapters as DTensors on a one-rank mesh, with the
  column-wise and row-wise parallel styles' input and output hooks and the adapter layouts of
  AutoModel's LoRA styles (column-wise: weight and both adapter matrices ``Shard(0)``, the
  rank-16 output of A gathered to ``Replicate``; row-wise: weight and both adapter matrices
  ``Shard(1)``). One rank holds the whole shard, so no collective moves data; every op still
  goes through DTensor's dispatch, which is what is timed.
* ``dtensor+sync``: both.
* ``plain-nolora``, ``dtensor-nolora`` (and their ``+sync``): the same without the adapters,
  plain frozen projections under the stock column-wise / row-wise styles; what the adapters'
  own DTensor ops add.

Printed per variant: milliseconds per layer (forward + re-run + backward) as the wall clock
sees it, the host's issue time per layer (until the last op is queued, before the final
synchronisation), and per layer the ops that reach ATen and those with a DTensor argument
(counted once, untimed, under a dispatch mode). Written to ``$OUT/dtensor_lora_host.json``
when ``OUT`` is set.

Run: ``python benchmarks/device/dtensor_lora_host.py`` (GPU) or
``python benchmarks/device/dtensor_lora_host.py --device cpu --shapes tiny`` (smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode

# One tensor-parallel rank's shapes: (hidden, query heads, KV heads, head dim, FFN columns).
SHAPES = {
    "llama70b-tp2": (8192, 32, 4, 128, 14336),  # the pipelined LoRA rows' plan
    "llama70b-tp8": (8192, 8, 1, 128, 3584),  # AutoModel PR #790's earlier TP 8 recipe
    "qwen32b-tp4": (5120, 10, 2, 128, 6912),  # AutoModel PR #802's TP 4 recipe
    "qwen32b-tp1": (5120, 40, 8, 128, 27648),  # the pipelined Qwen rows (no TP)
    "tiny": (64, 4, 2, 16, 128),
}


class Shapes:
    def __init__(self, name: str, seq: int):
        self.name = name
        self.hidden, self.heads, self.kv_heads, self.head_dim, self.ffn_local = SHAPES[name]
        self.seq = 32 if name == "tiny" else seq
        self.qkv_out = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.attn_in = self.heads * self.head_dim


class RMSNorm(nn.Module):
    """Hugging Face LlamaRMSNorm: float32 upcast, variance, rsqrt, scale, cast back."""

    def __init__(self, n: int, eps: float = 1e-5, **kw):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, **kw), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class LoRALinear(nn.Linear):
    """A frozen linear plus ``B(A(x) * scale)``, dropout 0 on the adapter's output."""

    def __init__(self, n_in: int, n_out: int, rank: int = 16, alpha: int = 32, **kw):
        super().__init__(n_in, n_out, bias=False, **kw)
        self.weight.requires_grad_(False)
        self.lora = rank > 0
        if not self.lora:  # a frozen plain projection (the "nolora" variants)
            return
        self.lora_A = nn.Linear(n_in, rank, bias=False, **kw)
        self.lora_B = nn.Linear(rank, n_out, bias=False, **kw)
        nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / rank

    def forward(self, x):
        res = F.linear(x, self.weight)
        if not self.lora:
            return res
        lora = self.lora_B(self.lora_A(x) * self.scale)
        lora = F.dropout(lora, p=0.0, training=self.training)
        return res + lora


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, s: Shapes, sync: bool, **kw):
        super().__init__()
        self.s, self.sync = s, sync
        self.qkv_proj = LoRALinear(s.hidden, s.qkv_out, **kw)
        self.o_proj = LoRALinear(s.attn_in, s.hidden, **kw)

    def forward(self, x, cos, sin, pos):
        s = self.s
        b, t, _ = x.shape
        qkv = self.qkv_proj(x)
        q_n, kv_n = s.heads * s.head_dim, s.kv_heads * s.head_dim
        q, k, v = qkv.split([q_n, kv_n, kv_n], dim=-1)
        q = q.view(b, t, -1, s.head_dim).transpose(1, 2)
        k = k.view(b, t, -1, s.head_dim).transpose(1, 2)
        v = v.view(b, t, -1, s.head_dim).transpose(1, 2)
        c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * c + rotate_half(q) * sn
        k = k * c + rotate_half(k) * sn
        if self.sync:  # Transformers' _is_packed_sequence at batch 1: a host read
            inc = torch.arange(pos.shape[1], device=pos.device) + pos.min()
            if b == 1 and (inc - pos).abs().sum().bool():
                raise RuntimeError("packed sequence")
        rep = s.heads // s.kv_heads  # Hugging Face repeat_kv, then one causal SDPA call
        k = k[:, :, None].expand(b, s.kv_heads, rep, t, s.head_dim).reshape(b, s.heads, t, -1)
        v = v[:, :, None].expand(b, s.kv_heads, rep, t, s.head_dim).reshape(b, s.heads, t, -1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, s: Shapes, **kw):
        super().__init__()
        self.gate_up_proj = LoRALinear(s.hidden, 2 * s.ffn_local, **kw)
        self.down_proj = LoRALinear(s.ffn_local, s.hidden, **kw)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    def __init__(self, s: Shapes, sync: bool, **kw):
        super().__init__()
        dev = {"device": kw["device"], "dtype": kw["dtype"]}
        self.input_layernorm = checkpoint_wrapper(RMSNorm(s.hidden, **dev))
        self.self_attn = checkpoint_wrapper(Attention(s, sync, **kw))
        self.post_attention_layernorm = checkpoint_wrapper(RMSNorm(s.hidden, **dev))
        self.mlp = checkpoint_wrapper(MLP(s, **kw))

    def forward(self, x, cos, sin, pos):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


def _put(mod, name, mesh, placements):
    p = getattr(mod, name)
    mod.register_parameter(name, nn.Parameter(distribute_tensor(p, mesh, placements),
                                              requires_grad=p.requires_grad))


def _place(module, mesh, dim: int) -> bool:
    """Shard a LoRA linear's weight and adapters along ``dim``; True where it has adapters.
    The styles' partition function is called for the adapters too: they are placed here."""
    if not isinstance(module, LoRALinear):
        return False
    for m in (module, module.lora_A, module.lora_B) if module.lora else (module,):
        _put(m, "weight", mesh, [Shard(dim)])
    return module.lora


class ColwiseLoRA(ColwiseParallel):
    """Column-wise style with the adapter layouts of AutoModel's LoRA styles (module docs)."""

    def _partition_linear_fn(self, name, module, mesh):
        if not _place(module, mesh, 0):
            return

        def gather(_m, _inp, out):
            if isinstance(out, DTensor) and any(isinstance(p, Shard) for p in out.placements):
                out = out.redistribute(out.device_mesh, [Replicate()])
            return out

        module.lora_A.register_forward_hook(gather)


class RowwiseLoRA(RowwiseParallel):
    def _partition_linear_fn(self, name, module, mesh):
        _place(module, mesh, 1)


def build(s: Shapes, n_layers: int, dtensor: bool, sync: bool, device, dtype, mesh,
          rank: int = 16):
    kw = {"device": device, "dtype": dtype, "rank": rank}
    layers = nn.ModuleList(Layer(s, sync, **kw) for _ in range(n_layers))
    if dtensor:
        for layer in layers:
            attn = layer.self_attn._checkpoint_wrapped_module
            mlp = layer.mlp._checkpoint_wrapped_module
            parallelize_module(attn, mesh, {"qkv_proj": ColwiseLoRA(), "o_proj": RowwiseLoRA()})
            parallelize_module(mlp, mesh, {"gate_up_proj": ColwiseLoRA(),
                                           "down_proj": RowwiseLoRA()})
    return layers


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0
        self.dtensor_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if any(issubclass(t, DTensor) for t in types):
            self.dtensor_ops += 1
        return func(*args, **(kwargs or {}))


def step(layers, x, cos, sin, pos, grad):
    h = x
    for layer in layers:
        h = layer(h, cos, sin, pos)
    h.backward(grad)


def run(variant: str, s: Shapes, args, device, mesh) -> dict:
    dtype = torch.bfloat16
    dtensor, sync = "dtensor" in variant, "sync" in variant
    rank = 0 if "nolora" in variant else 16
    torch.manual_seed(0)
    layers = build(s, args.layers, dtensor, sync, device, dtype, mesh, rank)
    x = torch.randn(1, s.seq, s.hidden, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x) * 1e-3
    pos = torch.arange(s.seq, device=device).unsqueeze(0)
    inv = 1.0 / (500000.0 ** (torch.arange(0, s.head_dim, 2, device=device).float() / s.head_dim))
    ang = torch.cat([pos[0, :, None].float() * inv] * 2, dim=-1)[None]
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    sync_dev = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step(layers, x, cos, sin, pos, grad)
    sync_dev()
    with Count() as c:
        step(layers, x, cos, sin, pos, grad)
    sync_dev()
    walls, issues = [], []
    for _ in range(args.iters):
        x.grad = None
        sync_dev()
        t0 = time.perf_counter()
        step(layers, x, cos, sin, pos, grad)
        t1 = time.perf_counter()
        sync_dev()
        t2 = time.perf_counter()
        issues.append((t1 - t0) * 1e3 / args.layers)
        walls.append((t2 - t0) * 1e3 / args.layers)
    del layers
    return {"variant": variant, "ms_per_layer": statistics.median(walls),
            "host_issue_ms_per_layer": statistics.median(issues),
            "ms_per_layer_min": min(walls), "ops_per_layer": c.ops / args.layers,
            "dtensor_ops_per_layer": c.dtensor_ops / args.layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="llama70b-tp2,llama70b-tp8,qwen32b-tp4,qwen32b-tp1",
                    help="comma-separated keys of SHAPES ('tiny' for a smoke test)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--variants", default="plain,plain+sync,dtensor,dtensor+sync")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    device = torch.device(args.device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=0, world_size=1)
    mesh = init_device_mesh(device.type, (1,))
    info = {"torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
            "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
            "seq": args.seq, "layers": args.layers, "iters": args.iters}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f
                               if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(json.dumps(info), flush=True)
    rows = []
    for name in args.shapes.split(","):
        s = Shapes(name, args.seq)
        for v in args.variants.split(","):
            r = {"shape": name, **run(v, s, args, device, mesh)}
            rows.append(r)
            print(json.dumps(r), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "dtensor_lora_host.json"), "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
