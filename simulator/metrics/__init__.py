"""Pure functions from engine records and the plan to the user-facing result.

Breakdown of the step on the *bottleneck* stage (the one with the most busy time);
its idle time, whatever the cause, is bubble:

    step_time = compute + exposed tp + cp + ep + pp + dp + host + bubble (+ variability)

``compute`` is kernel time on the compute stream (plus the optimizer step);
``tp/cp/ep`` the collective time left on the critical path inside phases;
``pp`` idle time spent waiting for a p2p transfer whose producer had already
finished; ``bubble`` the remaining pipeline idle time; ``dp`` the gradient
sync and parameter all-gather not hidden behind compute.

MFU (Chowdhery et al. 2022, PaLM, App. B; Narayanan et al. 2021): model FLOPs
per step, with attention counted unmasked and no recompute, over
``step_time * num_gpus * dense peak`` of the training precision. This is the
convention of NVIDIA's and Megatron's published MFUs, so they compare.

HFU (Korthikanti et al. 2022, Sec. 6): the FLOPs the simulated kernels execute
(recompute included, causal attention as executed, dropped MoE tokens not at
all) over ``step_time * num_gpus * peak``. HFU cannot exceed 1; MFU can, in
principle, at very long sequences, because it credits the unmasked attention
square that a causal kernel skips (see docs/mfu_hfu.md); ``mfu_causal`` counts the
half, and is printed beside MFU where the two differ by more than 10 %.
"""

from __future__ import annotations

from .result import CAUSAL_GAP, Result, summarize, with_expected_step

__all__ = ["CAUSAL_GAP", "Result", "summarize", "with_expected_step"]
