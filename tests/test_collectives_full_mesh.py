"""Directly wired scale-up meshes (AMD MI300X / MI355X xGMI): a group reaches only its own links.

Model: ``full_mesh`` on the innermost tier, :meth:`simulator.hardware.Tier.peer_share`
(``(l - 1) / (N - 1)`` of a GPU's bandwidth for ``l`` members of an ``N``-GPU mesh); source:
the ROCm/rccl README, "Improving performance on MI300 when using less than 8 GPUs"
(docs/collectives.md, "Fully connected meshes").
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.api import simulate
from simulator.collectives import collective_time
from simulator.config import load_topology
from simulator.errors import ConfigError
from simulator.hardware import Topology

GIB = 2**30


def _topo(name: str, **tier0) -> Topology:
    topo = Topology.from_config(load_topology(name))
    if not tier0:
        return topo
    t0 = dataclasses.replace(topo.tiers[0], **tier0)
    return dataclasses.replace(topo, tiers=(t0, *topo.tiers[1:]))


def _ring_closed_form(topo: Topology, n: int, nbytes: float) -> float:
    """Ring all-reduce 2(n-1)/n * S / B + 2(n-1) alpha + alpha_0 with B over the group's
    n - 1 of the mesh's N - 1 links (Thakur et al. 2005; the tier's size curve)."""
    t0 = topo.tiers[0]
    links = (n - 1) / (t0.size - 1)
    bw = t0.bandwidth * t0.efficiency * t0.size_efficiency(nbytes, n) * links
    return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * t0.latency_s + t0.base_latency_s


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mi300x_ring_all_reduce_uses_the_groups_own_links(n):
    topo = _topo("mi300x")
    assert topo.tiers[0].full_mesh
    got = collective_time("all_reduce", GIB, topo.place(n), topo)
    assert got == pytest.approx(_ring_closed_form(topo, n, GIB), rel=1e-9)


def test_a_whole_mesh_is_priced_as_before_and_a_pair_at_one_link():
    mesh, switched = _topo("mi300x"), _topo("mi300x", full_mesh=False)
    whole = collective_time("all_reduce", GIB, mesh.place(8), mesh)
    assert whole == pytest.approx(collective_time("all_reduce", GIB, switched.place(8), switched))
    # a TP 2 pair moves its 1 GiB over one of the seven 64 GB/s links: 7x the transfer term
    pair = collective_time("all_reduce", GIB, mesh.place(2), mesh)
    pair_switched = collective_time("all_reduce", GIB, switched.place(2), switched)
    alpha = 2 * mesh.tiers[0].latency_s + mesh.tiers[0].base_latency_s
    assert (pair - alpha) / (pair_switched - alpha) == pytest.approx(7.0, rel=1e-9)
    # busbw of the pair at 1 GiB: one link at the fitted 0.726, near the ~48 GB/s per link
    # AMD's RCCL / xGMI blog gives as usable (64 GB/s less CRC and protocol)
    busbw = GIB / pair / 1e9
    assert 40 <= busbw <= 48


def test_point_to_point_inside_a_mesh_runs_on_one_link():
    mesh, switched = _topo("mi300x"), _topo("mi300x", full_mesh=False)
    place = mesh.place(2)
    t_mesh = collective_time("send_recv", GIB, place, mesh)
    t_sw = collective_time("send_recv", GIB, switched.place(2), switched)
    fixed = mesh.tiers[0].latency_s + mesh.tiers[0].base_latency_s
    assert (t_mesh - fixed) / (t_sw - fixed) == pytest.approx(7.0, rel=1e-9)


def test_intra_node_all_to_all_reaches_l_minus_1_links():
    mesh, switched = _topo("mi300x"), _topo("mi300x", full_mesh=False)
    t4 = collective_time("all_to_all", GIB, mesh.place(4), mesh)
    t4_sw = collective_time("all_to_all", GIB, switched.place(4), switched)
    fixed = 3 * mesh.tiers[0].latency_s + mesh.tiers[0].base_latency_s
    assert (t4 - fixed) / (t4_sw - fixed) == pytest.approx(7 / 3, rel=1e-9)


def test_switched_tiers_are_unchanged():
    for name in ("dgx-h100", "gb200-nvl72", "dgx-a100"):
        topo = _topo(name)
        assert not topo.tiers[0].full_mesh
        assert all(topo.tiers[0].peer_share(m) == 1.0 for m in range(1, 9))


def test_a_group_across_nodes_keeps_its_local_share():
    # TP 2 at stride 8 (one member per node) never touches xGMI: the NIC prices it
    mesh, switched = _topo("mi300x"), _topo("mi300x", full_mesh=False)
    spread = mesh.place(2, stride=8)
    assert spread.local == 1
    assert collective_time("all_reduce", GIB, spread, mesh) == pytest.approx(
        collective_time("all_reduce", GIB, switched.place(2, stride=8), switched))
    # 16 ranks on two nodes, 8 per node: the node's share is whole, as before
    assert collective_time("all_reduce", GIB, mesh.place(16), mesh) == pytest.approx(
        collective_time("all_reduce", GIB, switched.place(16), switched))


def test_tp2_step_on_mi300x_exposes_more_tensor_parallel_time():
    plan = {"parallelism.tensor": 2, "parallelism.data": 4,
            "training.global_batch_size": 32, "training.micro_batch_size": 1}
    mesh = simulate("llama3-8b", "mi300x", plan)
    off = load_topology("mi300x").model_dump()
    off["tiers"][0]["full_mesh"] = False
    switched = simulate("llama3-8b", off, plan)
    assert mesh.exposed_comm_s["tp"] > switched.exposed_comm_s["tp"]
    assert mesh.step_time_s > switched.step_time_s
    # TP 8 fills the node: the mesh changes nothing
    plan8 = {**plan, "parallelism.tensor": 8, "parallelism.data": 1,
             "training.global_batch_size": 8}
    assert simulate("llama3-8b", "mi300x", plan8).step_time_s == pytest.approx(
        simulate("llama3-8b", off, plan8).step_time_s, rel=1e-12)


@pytest.mark.parametrize("tier, extra, field", [
    (1, {}, "tiers[1].full_mesh"),
    (0, {"nvls_busbw_GBps": 400.0}, "tiers[0].full_mesh"),
])
def test_schema_refuses_a_mesh_it_cannot_price(tier, extra, field):
    cfg = load_topology("mi300x").model_dump()
    cfg["tiers"][0]["full_mesh"] = False
    cfg["tiers"][tier].update({"full_mesh": True, **extra})
    with pytest.raises(ConfigError) as err:
        load_topology(cfg)
    assert field in str(err.value)


def test_calibrate_reads_a_two_gpu_log_as_one_link(tmp_path):
    """An rccl-tests log on 2 of a node's MI300X, made by the model at a per-link efficiency of
    0.65, calibrates back to 0.65: the fit prices the pair over its one link. Priced as a
    switch (all 7 links), the same log would fit about 0.65 / 7."""
    from simulator.calibrate import calibrate, synthetic

    truth = load_topology("mi300x").model_dump()
    truth["tiers"][0]["efficiency"] = 0.65
    log = tmp_path / "all_reduce_perf_2gpu.txt"
    log.write_text(synthetic.nccl_table(truth, "all_reduce", 2, 2,
                                        sizes=[2**i for i in range(20, 34)]))
    st = calibrate("mi300x", [log], min_bytes=2**20, compare=False).stages[0]
    assert st.values["tiers.0.efficiency"] == pytest.approx(0.65, rel=0.02)
    switched = load_topology("mi300x").model_dump()
    switched["tiers"][0]["full_mesh"] = False
    st = calibrate(switched, [log], min_bytes=2**20, compare=False).stages[0]
    assert st.values["tiers.0.efficiency"] == pytest.approx(0.65 / 7, rel=0.02)
