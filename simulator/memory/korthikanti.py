"""Activation memory per transformer layer, Korthikanti et al. 2022, Table 2.

Source: V. Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models", MLSys 2023 (arXiv:2205.05198), Table 2. Each function
returns **bytes of activations stored by one transformer layer for one
micro-batch**, for a GPT-style layer (MHA, ``ffn = 4h``, GeLU, dropout, 16-bit
activations, 1-byte dropout masks, no flash attention), exactly as printed:

* ``s`` sequence length (tokens), ``b`` micro-batch size (sequences),
  ``h`` hidden size, ``a`` attention heads, ``t`` tensor-parallel degree.

These are the reference the general model in :mod:`simulator.memory.activations`
reproduces when it is given the paper's setting.
"""

from __future__ import annotations


def korthikanti_no_parallel(s: float, b: float, h: float, a: float) -> float:
    """No parallelism: ``s*b*h*(34 + 5*a*s/h)`` bytes (Korthikanti 2022, Eq. 1 / Table 2)."""
    return s * b * h * (34 + 5 * a * s / h)


def korthikanti_tp(s: float, b: float, h: float, a: float, t: float) -> float:
    """Tensor parallel: ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` bytes (Korthikanti 2022, Table 2)."""
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def korthikanti_tp_sp(s: float, b: float, h: float, a: float, t: float) -> float:
    """Tensor + sequence parallel: ``s*b*h*(34/t + 5*a*s/(h*t))`` bytes (Korthikanti 2022)."""
    return s * b * h * (34 / t + 5 * a * s / (h * t))


def korthikanti_tp_selective(s: float, b: float, h: float, a: float, t: float) -> float:
    """TP with selective recompute: ``s*b*h*(10 + 24/t)`` bytes (Korthikanti 2022, Table 2).

    ``a`` is accepted for a uniform signature; the attention-score term is recomputed.
    """
    return s * b * h * (10 + 24 / t)


def korthikanti_tp_sp_selective(s: float, b: float, h: float, a: float, t: float) -> float:
    """TP + SP with selective recompute: ``s*b*h*34/t`` bytes (Korthikanti 2022, Table 2)."""
    return s * b * h * 34 / t


def korthikanti_full_recompute(s: float, b: float, h: float) -> float:
    """Full recompute: ``2*s*b*h`` bytes, only the 16-bit layer input (Korthikanti 2022)."""
    return 2 * s * b * h
