"""Sustained SM clock under a board power limit: the fraction of peak FLOP/s a cap leaves.

A GPU running dense GEMMs at its default limit is power-bound: it draws its TDP ``P_tdp``
and the firmware sets the clock that keeps it there. Board power is a part that does not
follow the SM clock ``P_s`` (leakage, HBM, NVLink, board; taken as the draw of an idle-but-
clocked GPU, ``power.gpu_idle_fraction * P_tdp``) plus dynamic power ``P_dyn ~ f * V**2``;
over the DVFS range the voltage follows the clock, so ``P_dyn ~ f**k`` with ``k =
power.dvfs_exponent`` (3, the CMOS switching-power law ``alpha C V^2 f``: Weste & Harris,
CMOS VLSI Design, sec. 5.1). A cap ``P_cap`` below the TDP therefore sustains

    ``f / f_0 = ((P_cap - P_s) / (P_tdp - P_s)) ** (1 / k)``   (at most 1)

of the default clock. Compute-bound work (tensor-core GEMMs, attention) scales with it;
HBM bandwidth does not (the memory clock is not throttled, and memory-bound kernels stay
below the cap: Ma et al., arXiv:2605.11999, decode draws 137-300 W of a 700 W H200).
The energy model charges a computing GPU ``P_s + (gpu_compute_fraction * P_tdp - P_s) *
(f / f_0) ** k`` (:func:`compute_power_W`): the same clock ratio.
Units: W, dimensionless ratios.
"""

from __future__ import annotations

from ..config.topology import TopologyConfig
from ..errors import ConfigError


def power_limit_W(cfg: TopologyConfig) -> float | None:
    """The board limit in force, W: ``gpu.power_limit_W``, else the TDP (None: no power)."""
    cap, tdp = cfg.gpu.power_limit_W, cfg.power.gpu_tdp_W
    if cap is None:
        return tdp
    if tdp is None:
        raise ConfigError("gpu.power_limit_W", cap,
                          "needs power.gpu_tdp_W (the default limit) in the topology")
    floor = cfg.power.gpu_idle_fraction * tdp
    if cap <= floor:
        raise ConfigError("gpu.power_limit_W", cap,
                          f"must exceed the clock-independent draw {floor:.0f} W "
                          f"(power.gpu_idle_fraction x gpu_tdp_W)")
    return cap


def clock_ratio(cfg: TopologyConfig) -> float:
    """Sustained SM clock under the limit over the default (TDP) clock, in (0, 1]."""
    cap, tdp = power_limit_W(cfg), cfg.power.gpu_tdp_W
    if cap is None or tdp is None or cap >= tdp:
        return 1.0
    static = cfg.power.gpu_idle_fraction * tdp
    return ((cap - static) / (tdp - static)) ** (1.0 / cfg.power.dvfs_exponent)


def compute_power_W(cfg: TopologyConfig) -> float | None:
    """A computing GPU's mean draw under the limit, W (None: no power described).

    The clock-independent part ``P_s`` stays; the dynamic part of the default compute draw
    ``gpu_compute_fraction * P_tdp - P_s`` scales as the clock to the power ``k``, as the
    GEMM's does (``(P_cap - P_s) / (P_tdp - P_s)``): the same figure that sets the clock."""
    pw = cfg.power
    if pw.gpu_tdp_W is None:
        return None
    static = pw.gpu_idle_fraction * pw.gpu_tdp_W
    dynamic = max(0.0, pw.gpu_compute_fraction * pw.gpu_tdp_W - static)
    return static + dynamic * clock_ratio(cfg) ** pw.dvfs_exponent
