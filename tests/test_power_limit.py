"""GPU power limit: gpu.power_limit_W -> sustained clock -> FLOP/s; the same clock in energy."""

from __future__ import annotations

import pytest

from simulator.api import resolve, simulate
from simulator.compute import gemm_time, memory_time
from simulator.config import load_topology
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.hardware.power import clock_ratio, compute_power_W
from simulator.reliability.energy import it_energy_J


def _cfg(cap=None, name="dgx-h100"):
    return load_topology(name, {} if cap is None else {"gpu.power_limit_W": cap})


def test_clock_follows_the_dvfs_closed_form():
    # H100: TDP 700 W, clock-independent 0.3 x 700 = 210 W, P_dyn ~ f^3
    assert clock_ratio(_cfg()) == 1.0 == clock_ratio(_cfg(700)) == clock_ratio(_cfg(900))
    assert clock_ratio(_cfg(500)) == pytest.approx(((500 - 210) / (700 - 210)) ** (1 / 3))
    caps = [650, 550, 450, 350, 250]
    ratios = [clock_ratio(_cfg(c)) for c in caps]
    assert ratios == sorted(ratios, reverse=True) and 0 < ratios[-1] < 1


def test_compute_bound_work_slows_by_the_clock_memory_bound_does_not():
    full, capped = (Topology.from_config(_cfg(c)).gpu for c in (None, 450))
    r = clock_ratio(_cfg(450))
    big = [gemm_time(8192, 8192, 8192, g, "bf16") - g.kernel_overhead_s for g in (full, capped)]
    assert big[1] == pytest.approx(big[0] / r)
    assert memory_time(1e9, capped) == memory_time(1e9, full)
    # MFU keeps the datasheet denominator
    assert capped.datasheet_peak("bf16") == pytest.approx(full.peak("bf16"))


def test_a_lower_limit_lengthens_the_step_and_the_override_is_per_job():
    steps = [simulate("llama3-8b", "dgx-h100", topology_overrides=None if c is None else
                      {"gpu.power_limit_W": c}).step_time_s for c in (None, 600, 450, 300)]
    assert steps == sorted(steps) and steps[-1] > 1.2 * steps[0]
    base = simulate("llama3-8b", "dgx-h100")
    assert base.step_time_s == steps[0]  # no limit: unchanged


def test_energy_uses_the_same_clock():
    full, capped = _cfg(), _cfg(450)
    p_full, p_cap = compute_power_W(full), compute_power_W(capped)
    assert p_full == pytest.approx(0.85 * 700)
    static = 0.3 * 700
    assert p_cap == pytest.approx(static + (p_full - static) * clock_ratio(capped) ** 3)
    # an hour computing: the limit lowers the GPU part of the energy accordingly
    e_full, e_cap = (it_energy_J(c, 8, 3600.0, 3600.0) for c in (full, capped))
    node = 3000 + 8 * 100
    assert e_full - e_cap == pytest.approx(8 * (p_full - p_cap) * 3600.0)
    assert e_cap > node * 3600.0


@pytest.mark.parametrize(("over", "field"), [({"gpu.power_limit_W": 150}, "gpu.power_limit_W"),
                                             ({"gpu.power_limit_W": 400,
                                               "power.gpu_tdp_W": None}, "gpu.power_limit_W")])
def test_bad_limits_name_the_field(over, field):
    with pytest.raises(ConfigError) as err:
        _, t = resolve("llama3-8b", "dgx-h100", None, over)
        Topology.from_config(t)
    assert field in str(err.value)
