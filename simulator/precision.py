"""Training precisions as one type: a new number format is one entry of :data:`PRECISIONS`.

A :class:`Precision` says everything the simulator asks of ``training.precision``:

* ``element_bytes``: bytes of one GEMM operand, and of a GEMM input saved for the
  backward (Transformer Engine keeps the FP8 copy), 2 for 16-bit formats, 1 for FP8;
* ``peak``: the GPU peak MFU divides by (a key of the topology's ``peak_tflops``);
* ``kernel``: the peak its GEMM kernels are timed at (fp16 GEMMs run at the bf16 rate
  on the GPUs shipped), and ``efficiency``, the GPU field of their large-GEMM
  efficiency ceiling;
* ``casts``: the quantisation traffic around each scaled GEMM (:class:`Casts`, HBM
  bytes per element; None for formats the GEMMs take as they are), costed by
  :mod:`simulator.workload.fp8`; a scaled format also keeps its own weight copies
  (:mod:`simulator.memory.states`);
* ``recipes``: its scaling recipes (Megatron-Core ``--fp8-recipe``), and of them
  ``job_wide_amax``, those whose amax reduction is a barrier of the whole TP x DP x CP
  group at every ``fp8_autocast`` exit (:mod:`simulator.metrics.variability`).

Adding a format (MXFP8 as its own entry; NVFP4 is ``fp4``): one entry here, plus what the hardware
must say about it: its peak (a ``gpu.peak_tflops`` field, which the topology turns into
a peak by itself) and, if its GEMMs reach a different share of it, the efficiency field
named by ``efficiency``.

Cast bytes: Transformer Engine v1.11 (``transformer_engine/pytorch/module/linear.py``,
``layernorm_linear.py``; kernels ``fp8_cast_transpose_fused``, ``fp8_transpose``): a
plain linear's input is read in 16-bit (2 B) and written as row-wise and column-wise FP8
(1 + 1 B); a norm-fused linear's input only gets its transpose (read 1 B, write 1 B);
the output gradient as a plain input; a 16-bit weight as a plain input, an FP8 weight
(``fp8_param_gather``) its transpose only; sequence-parallel all-gathers feeding an FP8
linear move FP8 (half the 16-bit bytes); a routed expert's input is read in 16-bit and
written row-wise and column-wise, the latter kept for the weight gradient (2 + 1 + 1 B:
``grouped_linear.py`` ``fp8_multi_cast_transpose_fused`` in v1.11, and at NVIDIA/
TransformerEngine d0067d0d its input quantizer's ``set_usage(rowwise=True,
columnwise=is_grad_enabled and weight_requires_grad and not save_original_input)``; until
2026-12 this was 2 + 1 B, the row-wise copy only). Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class Casts:
    """HBM bytes per element of the quantisation kernels around one scaled linear."""

    input: float  # plain linear input: read 16-bit, write row-wise + column-wise copies
    input_transpose: float  # norm-fused linear input: the norm wrote it; transpose only
    grad: float  # output gradient, as a plain input
    weight: float  # 16-bit weight -> scaled weight + transpose, once per step
    weight_transpose: float  # weight already scaled (fp8_param_gather): transpose only
    gather_ratio: float  # bytes of a sequence-parallel all-gather over its 16-bit bytes
    expert_input: float  # a routed expert's grouped-GEMM input: read 16-bit, write both copies


@dataclass(frozen=True)
class Precision:
    """One training precision (module docs)."""

    name: str
    element_bytes: float
    peak: str
    kernel: str
    efficiency: str
    casts: Casts | None = None
    recipes: tuple[str, ...] = ()
    job_wide_amax: tuple[str, ...] = ()
    # every recipe scales in blocks along each GEMM's K, so a weight's row- and column-wise
    # copies are quantised apart and both kept on every GPU (memory/states.py)
    block_scaled: bool = False

    @property
    def scaled(self) -> bool:
        """Whether GEMMs need scaled copies of their operands (casts, weight copies)."""
        return self.casts is not None


# bytes per element of every stored dtype (weights, gradients, optimizer states, activations)
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}

FP8_CASTS = Casts(input=4.0, input_transpose=2.0, grad=4.0, weight=4.0,
                  weight_transpose=2.0, gather_ratio=0.5, expert_input=4.0)

# NVFP4 (Transformer Engine ``NVFP4BlockScaling``, ``transformer_engine/common/recipe/
# __init__.py`` at NVIDIA/TransformerEngine d0067d0d; Alvarez et al. 2025, "Pretraining Large
# Language Models with NVFP4", arXiv:2509.25149): E2M1 values (0.5 B) with one E4M3 scale per
# 16 values (1/16 B), so 0.5625 B an element per copy. The row-wise and column-wise copies are
# quantised apart from the 16-bit tensor (block scales run along each GEMM's K; the two are
# not transposes of each other), the column-wise one after a 16x16 random Hadamard transform,
# and both take a per-tensor FP32 scale from the tensor's amax, so each quantisation reads
# the 16-bit tensor twice (amax, then cast: 2 + 2 B) and writes both copies (2 x 0.5625 B):
# 5.125 B an element for an input, an output gradient or a 16-bit weight. The norm writes
# 16-bit output and its amax, then the quantiser runs (``csrc/extensions/normalization.cpp``:
# with RHT and post-RHT amax the NVFP4 path is UNFUSED), so a norm-fused input costs as a
# plain one. An NVFP4 weight (``fp4_param_gather``) is 2D-block scaled (16 x 16 blocks), so
# its column-wise copy is the row-wise one transposed: read + write 0.5625 B. Sequence-parallel
# all-gathers move both copies (``distributed.py`` ``_all_gather_nvfp4``): 1.125 of 2 bytes.
NVFP4_BYTES = 0.5625
NVFP4_CASTS = Casts(input=5.125, input_transpose=5.125, grad=5.125, weight=5.125,
                    weight_transpose=2 * NVFP4_BYTES, gather_ratio=NVFP4_BYTES,
                    expert_input=5.125)

PRECISIONS: dict[str, Precision] = {
    "bf16": Precision("bf16", 2.0, peak="bf16", kernel="bf16", efficiency="gemm_efficiency"),
    "fp16": Precision("fp16", 2.0, peak="fp16", kernel="bf16", efficiency="gemm_efficiency"),
    "fp8": Precision("fp8", 1.0, peak="fp8", kernel="fp8", efficiency="fp8_gemm_efficiency",
                     casts=FP8_CASTS,
                     recipes=("delayed", "tensorwise", "mxfp8", "blockwise", "rowwise"),
                     job_wide_amax=("delayed",)),
    # Megatron-Core --fp4-format e2m1 with --fp4-recipe nvfp4 (Megatron-Bridge
    # bf16_with_nvfp4_mixed): linears in NVFP4; attention, the output layer and the loss in
    # bf16 as under FP8.
    "fp4": Precision("fp4", NVFP4_BYTES, peak="fp4", kernel="fp4",
                     efficiency="fp4_gemm_efficiency", casts=NVFP4_CASTS,
                     recipes=("nvfp4",), block_scaled=True),
}
NAMES = tuple(PRECISIONS)
RECIPES = PRECISIONS["fp8"].recipes  # Megatron-Core --fp8-recipe
FP4_RECIPES = PRECISIONS["fp4"].recipes  # Megatron-Core --fp4-recipe
# recipes of one library that only the stack profiles pricing them run (their ``recipes``
# section, config/stacks.py): torchao's rowwise scaling is not a Megatron-Core recipe
STACK_RECIPES = ("rowwise",)


def precision_of(name: str) -> Precision:
    """The :class:`Precision` called ``name``; ConfigError if there is none."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ConfigError("training.precision", name,
                          f"one of {', '.join(PRECISIONS)}") from None
