"""The network bill of materials: fat-tree closed forms, NVIDIA's SuperPOD table, power in MWh."""

from __future__ import annotations

import math

import pytest

from simulator import time_to_train
from simulator.capacity import capacity
from simulator.capacity.bom import bill_of_materials, fat_tree
from simulator.config import load_topology
from simulator.reliability.energy import MWH


@pytest.mark.parametrize("radix", [8, 40, 64])
def test_two_tier_fat_tree_matches_the_closed_form(radix):
    half = radix // 2
    for n in range(radix + 1, radix * half + 1, 7):  # just past one switch up to k^2/2
        leaf = math.ceil(n / half)
        spine = math.ceil(leaf * half / radix)
        switches, links = fat_tree(n, radix)
        assert switches == [leaf, spine], n
        assert links == [n, leaf * half]


def test_one_switch_and_three_levels():
    assert fat_tree(64, 64) == ([1], [64])
    switches, _ = fat_tree(64 * 32 + 1, 64)  # one past the two-level capacity k^2/2
    assert len(switches) == 3


def test_oversubscription_trades_spines_for_down_ports():
    # 3:1 on radix 64: 48 ports down and 16 up per leaf
    assert fat_tree(1024, 64, 3.0) == ([22, 6], [1024, 22 * 16])


@pytest.mark.parametrize("gpus, expect", [
    (512, [16, 8]), (1024, [32, 16]), (2048, [64, 32]), (4096, [128, 128, 64]),
    (8192, [256, 256, 128]), (16384, [512, 512, 256])])
def test_dgx_b200_reproduces_the_superpod_reference_table(gpus, expect):
    # DGX SuperPOD B200 reference architecture, "Larger SuperPOD component counts"
    # (leaf / spine / core switches; node-leaf and leaf-spine cables equal the GPU count)
    b = bill_of_materials(load_topology("dgx-b200"), gpus)
    assert b.switches == expect and b.links[:2] == [gpus, gpus]


def test_nodes_racks_and_nvlink_switches():
    b = bill_of_materials(load_topology("gb200-nvl72"), 1024)
    assert (b.nodes, b.racks, b.scaleup_domains, b.scaleup_switches) == (256, 15, 15, 135)
    h = bill_of_materials(load_topology("dgx-h100"), 256)
    assert (h.nodes, h.racks, h.scaleup_switches) == (32, 8, 128)
    # one node: no scale-out fabric at all
    assert bill_of_materials(load_topology("dgx-h100"), 8).network_W == 0.0


def test_network_power_counts_switches_and_both_transceiver_ends():
    t = load_topology("dgx-h100")
    b = bill_of_materials(t, 256)  # 8 leaf + 4 spine, 256 NIC links + 256 leaf-spine links
    f = t.fabric
    ends = 256 + 2 * 256
    expect = (12 * f.switch_power_W + ends / f.transceiver_ports * f.transceiver_power_W
              + 256 / f.nic_transceiver_ports * f.nic_transceiver_power_W)
    assert b.network_W == pytest.approx(expect)


def test_unknown_fabric_says_so():
    a100 = bill_of_materials(load_topology("dgx-a100"), 256)  # radix known, power not
    assert a100.switches and a100.network_W is None and "power" in a100.unknown
    bare = load_topology("dgx-h100", {"fabric.switch_radix": None})
    b = bill_of_materials(bare, 256)
    assert b.levels is None and b.switches == [] and b.network_W is None and b.unknown


def test_network_power_is_part_of_mwh():
    df = capacity("tiny", 1e9, ["dgx-h100"], [16], executor="serial", mc_runs=5)
    r = df.iloc[0]
    assert r.network_power_from == "bom" and r.network_kW > 0
    zero = time_to_train("tiny", "dgx-h100", 1e9, r.overrides,
                         {"power.network_W_per_gpu": 0.0}, mc_runs=5)
    pue = load_topology("dgx-h100").power.pue
    fabric_MWh = r.network_kW * 1e3 * r.days * 86400 * pue / MWH
    assert r.energy_MWh - zero.energy_MWh == pytest.approx(fabric_MWh, rel=1e-9)


def test_unknown_fabric_power_keeps_the_topology_estimate():
    df = capacity("tiny", 1e9, ["dgx-a100"], [16], executor="serial", mc_runs=5)
    r = df.iloc[0]
    assert r.network_power_from.startswith("topology") and r.network_kW is None
    assert r.switches_L1 > 0


def test_fabric_prices_add_the_network_capital_cost():
    df = capacity("tiny", 1e9, ["dgx-h100"], [16], prices={"dgx-h100": 2.0},
                  switch_price=30000.0, transceiver_price=800.0, executor="serial",
                  mc_runs=5)
    r = df.iloc[0]
    switches = r.switches_L1 + r.switches_L2 + r.switches_L3
    assert switches > 0 and r.transceivers > 0
    assert r.network_capex_usd == switches * 30000.0 + r.transceivers * 800.0
    assert r.cost_usd == r.gpu_hours * 2.0  # the GPU cost stays GPU-hours x price
    assert r.total_cost_usd == r.cost_usd + r.network_capex_usd


def test_optics_per_level_add_up():
    b = bill_of_materials(load_topology("gb200-nvl72"), 4096)  # 3 levels, 1-port NIC optics
    assert b.transceivers_by_level == [4096 + 2048, 4096, 4096]
    assert b.transceivers == sum(b.transceivers_by_level)
