"""NVLink5 collectives by group size: the curve holds for 4-, 8- and 16-GPU TP / EP groups.

Measured points: ``validation/collectives/nvlink5_groups.yaml`` (sources there); model:
``curve_ranks`` (per-rank shard), ``base_latency_us`` and ``ll_busbw_GBps`` of the NVLink5
tiers (docs/collectives.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.collectives import bus_bandwidth, collective_time
from simulator.collectives.group_fit import (
    load_groups,
    predicted_busbw,
    predicted_time_us,
    residuals,
)
from simulator.config import load_topology
from simulator.hardware import Topology

GROUPS = {g["group"]: g for g in load_groups()}


def _topo(name: str) -> Topology:
    return Topology.from_config(load_topology(name))


def _seconds(topo: Topology, n: int, nbytes: float) -> float:
    return collective_time("all_reduce", nbytes, topo.place(n), topo)


def test_four_gpu_tray_curve_from_1kib_to_8gib():
    # the fitted group: every point of the 24-point curve within 20 %, rms within 6 %
    err = residuals("gb200-nvl72", None, [GROUPS["gb200-tray-4gpu-ring"]])
    assert np.sqrt(np.mean(err ** 2)) <= 0.06
    assert np.max(np.abs(np.expm1(err))) <= 0.20


def test_four_gpu_tray_at_the_issue_sizes_within_10_percent():
    g = GROUPS["gb200-tray-4gpu-ring"]
    topo = _topo("gb200-nvl72")
    points = dict(g["points"])
    for size in (1024, 2**20, 32 * 2**20, 2**30):
        got = predicted_busbw(topo, 4, size, "ring")
        assert abs(got / points[size] - 1) <= 0.10, (size, got, points[size])


def test_eight_gpus_on_two_trays_at_the_issue_sizes_within_10_percent():
    # never fitted: Oracle's 8-rank sweep over two GB200 trays of one NVL72 domain (NCCL
    # 2.26.6, NVLS on), against the constants fitted on the 4-GPU tray and the 72-GPU curve
    g = GROUPS["gb200-oke-8gpu-2tray"]
    assert not g.get("fit")
    topo = _topo("gb200-nvl72")
    times = dict(g["times_us"])
    for size in (8, 2**20, 32 * 2**20, 2**30):
        got = predicted_time_us(topo, 8, size, None)
        assert abs(got / times[size] - 1) <= 0.10, (size, got, times[size])


def test_eight_gpus_on_two_trays_whole_sweep():
    # 8 B .. 32 GiB: every size within 25 %; the residual is in time, so a group with
    # ``times_us`` is judged at sizes whose busbw column reads 0.00
    g = GROUPS["gb200-oke-8gpu-2tray"]
    err = np.expm1(-residuals("gb200-nvl72", None, [g]))  # predicted / measured time - 1
    assert len(err) == len(g["times_us"]) == 33
    assert np.max(np.abs(err)) <= 0.25
    # the plateau: 1-32 GiB within 10 % (NVLS, the model's choice there)
    big = [e for (s, _), e in zip(g["times_us"], err, strict=True) if s >= 2**30]
    assert max(abs(e) for e in big) <= 0.10


@pytest.mark.parametrize("group", ["gb200-mnnvl-8gpu-peak", "gb200-a4x-8gpu-2tray",
                                   "gb200-a4x-32gpu", "gb200-a4x-64gpu",
                                   "gb200-nvl72-72gpu-nvls"])
def test_large_messages_within_10_percent(group):
    g = GROUPS[group]
    topo = _topo(g["topology"])
    for size, measured in g["points"]:
        got = predicted_busbw(topo, g["ranks"], size, g.get("algo"))
        assert abs(got / measured - 1) <= 0.10, (size, got, measured)


def test_b200_eight_gpu_proxy_within_its_documented_disagreement():
    # 8 x B200 HGX as a proxy for 8 NVL72 GPUs (NVLS use not stated): 16 GiB within the
    # bar's 10 %, every point within 25 % (28-38 % before NVLS held its algorithm bandwidth)
    g = GROUPS["b200-hgx-8gpu"]
    topo = _topo("gb200-nvl72")
    errs = {s: predicted_busbw(topo, 8, s, None) / v - 1 for s, v in g["points"]}
    assert abs(errs[16 * 2**30]) <= 0.10
    assert max(abs(e) for e in errs.values()) <= 0.25


def test_nvls_holds_its_algorithm_bandwidth_across_group_sizes():
    # in-switch reduction moves S in and S out of each GPU whatever the group size: at a
    # large message the NVLS bandwidth term is the same for 4, 8, 16 and 72 GPUs (only the
    # 2(n-1) latency steps differ), so its busbw grows as 2(n-1)/n ...
    topo = _topo("gb200-nvl72")
    tier = topo.tiers[0]
    size = 16 * 2**30
    terms = [collective_time("all_reduce", size, topo.place(n), topo, algo="nvls")
             - 2 * (n - 1) * tier.latency_s - tier.base_latency_s for n in (4, 8, 16, 72)]
    assert max(terms) / min(terms) == pytest.approx(1.0, abs=0.02)
    # ... and a 4-GPU tray is not priced above what one tray measured (A4X 683, Azure 680
    # GB/s at 8 GiB): under a size-independent busbw, NVLS priced it at 876 (+28 %)
    best = bus_bandwidth("all_reduce", 8 * 2**30, 4, _seconds(topo, 4, 8 * 2**30)) / 1e9
    assert best <= 1.05 * dict(GROUPS["gb200-tray-4gpu-ring"]["points"])[8 * 2**30]


def test_eight_gpu_group_no_longer_priced_like_a_rack():
    # issue 28: 8 B cost 154 us on 8 NVL72 GPUs against 14 us on H100, and 32 MB ran at half
    # the H100 bandwidth. Now small groups pay their own (fewer) steps and reach the plateau
    # at their own (per-rank) size.
    gb, h100 = _topo("gb200-nvl72"), _topo("dgx-h100")
    assert _seconds(gb, 8, 8) < 2 * _seconds(h100, 8, 8)
    busbw = {t: bus_bandwidth("all_reduce", 32e6, 8, _seconds(topo, 8, 32e6))
             for t, topo in (("gb", gb), ("h100", h100))}
    assert busbw["gb"] > busbw["h100"]


def test_time_grows_with_group_size_and_the_curve_follows_the_shard():
    topo = _topo("gb200-nvl72")
    for size in (8, 2**20, 32 * 2**20, 2**30):
        times = [_seconds(topo, n, size) for n in (4, 8, 16, 72)]
        assert times == sorted(times), (size, times)
    tier = topo.tiers[0]
    assert tier.size_efficiency(32e6, 8) > tier.size_efficiency(32e6, 72)
    assert tier.half_point(8) == pytest.approx(tier.half_bandwidth_bytes * 8 / 72)


def test_without_the_new_fields_a_tier_is_unchanged():
    # dgx-h100 sets none of curve_ranks / base_latency_us / ll_busbw_GBps: the curve sees S
    h = _topo("dgx-h100").tiers[0]
    assert h.curve_ranks == 0 and h.base_latency_s == 0 and h.ll_busbw == 0
    assert h.size_efficiency(32e6, 8) == h.size_efficiency(32e6)


def test_group_fit_without_fit_groups_compares_only(capsys):
    from simulator.collectives.group_fit import main

    assert main(["gb300-nvl72"]) == 0
    out = capsys.readouterr().out
    assert "no group marked fit: true" in out and "gb300-2tray-8gpu-nccl-symm-vllm" in out


def test_h100_nvls_is_bound_by_each_gpus_link():
    # one NVSwitch domain: each GPU's link carries S(1 + 1/n) each way, so the NVLS algorithm
    # bandwidth grows as n/(n+1) from its 8-GPU figure (busbw 2B(n-1)/(n+1))
    topo = _topo("dgx-h100")
    tier = topo.tiers[0]
    assert tier.nvls_ranks == 8 and tier.nvls_link_bound
    size = 8 * 2**30
    algbw = {n: size / (collective_time("all_reduce", size, topo.place(n), topo, algo="nvls")
                        - 2 * (n - 1) * tier.latency_s) for n in (2, 4, 5, 8)}
    for n in (2, 4, 5):
        assert algbw[n] / algbw[8] == pytest.approx((n / (n + 1)) / (8 / 9), rel=1e-3)
    # NVIDIA/nccl#1455 (8 x H100, 2-4 GiB): 365-370 GB/s on 2-4 GPUs (the ring's), 420 / 440 /
    # 460 / 480 on 5-8; the model's fastest algorithm within 5 % of each
    measured = {2: 367.5, 3: 367.5, 4: 367.5, 5: 420, 6: 440, 7: 460, 8: 480}
    for n, want in measured.items():
        got = bus_bandwidth("all_reduce", 4 * 2**30, n, _seconds(topo, n, 4 * 2**30)) / 1e9
        assert got == pytest.approx(want, rel=0.05), n
    # a TP 4 group is no longer priced at the 8-GPU NVLS busbw (482 GB/s, +31 %)
    four = bus_bandwidth("all_reduce", 4 * 2**30, 4, _seconds(topo, 4, 4 * 2**30)) / 1e9
    assert four < 400


def test_nvls_link_bound_needs_the_group_size_it_was_measured_at():
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError, match="nvls_link_bound"):
        load_topology("dgx-h100", {"tiers.0.nvls_ranks": None})
