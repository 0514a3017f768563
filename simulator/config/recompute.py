"""Activation recomputation as Megatron-Core configures it, resolved once.

Megatron-Core (``megatron/core/transformer/transformer_config.py``, arguments
``--recompute-granularity``, ``--recompute-method``, ``--recompute-num-layers``,
``--recompute-modules``) offers two granularities:

* ``selective``: inside every layer, the listed *modules* are not stored but re-run in
  the backward pass. Modules: ``core_attn`` (the attention core; Megatron's default
  list), ``mlp`` (the dense MLP), ``moe`` (the whole MoE block), ``moe_act`` (the
  experts' activation function), ``layernorm`` (input and pre-MLP norms),
  ``mla_up_proj`` (MLA up-projections) and ``shared_experts``. One more, not Megatron's:
  ``op_sac``, torchtitan's per-op policy (``activation_checkpoint.selective_ac_option:
  op``: keep every second GEMM output and the attention output, rerun the rest;
  :mod:`simulator.shape.op_sac`), listed alone.
* ``full``: whole layers keep only their input. ``uniform`` splits a stage's layers
  into groups of ``recompute_num_layers`` and keeps one input per group; ``block``
  recomputes the first ``recompute_num_layers`` layers of each model chunk and keeps
  the others whole.

The project's older ``training.recompute: none | selective | full`` is a shorthand:
``selective`` = granularity selective with ``[core_attn]``; ``full`` = granularity
full, method uniform, one layer per group (Korthikanti et al. 2022, Section 5).
"""

from __future__ import annotations

from dataclasses import dataclass

MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts",
           "op_sac")
DEFAULT_MODULES = ("core_attn",)  # Megatron-Core's default recompute_modules


@dataclass(frozen=True)
class Recompute:
    """What is recomputed: ``granularity`` none|selective|full, the full-recompute
    ``method`` and ``num_layers``, and the selective ``modules``."""

    granularity: str = "none"
    method: str = "uniform"
    num_layers: int = 1
    modules: tuple[str, ...] = ()

    @property
    def full(self) -> bool:
        return self.granularity == "full"

    def has(self, module: str) -> bool:
        """Whether selective recompute covers ``module``."""
        return self.granularity == "selective" and module in self.modules

    def layer_recomputed(self, position: int) -> bool:
        """Whether the layer at ``position`` (0-based, within its model chunk) is fully
        recomputed: every layer under ``uniform``, the first ``num_layers`` under ``block``."""
        if not self.full:
            return False
        return self.method == "uniform" or position < self.num_layers

    def describe(self) -> str:
        if self.granularity == "selective":
            return f"selective [{', '.join(self.modules)}]"
        if self.full:
            return f"full ({self.method}, {self.num_layers} layer{'s' * (self.num_layers > 1)})"
        return "none"


def resolve_recompute(shorthand: str, granularity: str | None, method: str | None,
                      num_layers: int | None, modules: tuple[str, ...] | None) -> Recompute:
    """The effective setting from the shorthand and Megatron's explicit arguments
    (validated by :class:`~simulator.config.workload.TrainingConfig`)."""
    g = granularity or shorthand
    if g == "selective":
        return Recompute("selective", modules=tuple(modules or DEFAULT_MODULES))
    if g == "full":
        return Recompute("full", method=method or "uniform", num_layers=num_layers or 1)
    return Recompute()
