"""The network's bill of materials for N GPUs: nodes, racks, switches, links, optics, power.

Scale-up: ``ceil(N / tiers[0].size)`` domains (NVLink), each with
``fabric.scaleup_switches_per_domain`` switches; copper, no optics, and their power is
already in ``power.node_other_W``, so it is not added again.

Scale-out: a folded Clos (fat tree) of radix-``k`` switches over ``E = N * p`` endpoints
(``p = ceil(tiers[1].bandwidth_GBps * 8 / port_Gbps)`` ports per GPU). It has the fewest
levels ``L`` whose capacity ``k * d**(L-1)`` holds ``E``; a switch below the top has
``u = ceil(k / (1 + o))`` ports up and ``d = k - u`` down (``o``: the outermost tier's
``oversubscription``, so ``d = u = k/2`` at 1:1), a top switch all ``k`` down. Switch
counts, level by level::

    S_1 = ceil(E / d_1),   S_j = ceil(S_(j-1) * u / d_j)   (d_L = k at the top)

which at 1:1 and two levels is leaf ``ceil(N / (k/2))``, spine ``ceil(leaf * (k/2) / k)``,
and reproduces the switch counts of NVIDIA's DGX SuperPOD B200 reference architecture
(Table "Larger SuperPOD component counts": 512 GPUs 16 leaf / 8 spine, 4096 GPUs 128 / 128 /
64 core). Links: ``E`` from the NICs into level 1, ``S_j * u`` from level j up. Every
scale-out link is optical: a switch-side transceiver carries ``transceiver_ports`` ports, a
NIC-side one ``nic_transceiver_ports``; optics are counted per level (the links into it).
Power (W) = switches x ``switch_power_W`` + transceivers x their power; ``None`` wherever
a needed field is unknown.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import TopologyConfig
from ..errors import ConfigError

MAX_LEVELS = 6


@dataclass(frozen=True)
class Bom:
    """Counts (and W) for one cluster; ``None`` where the topology does not say."""

    nodes: int
    racks: int | None
    scaleup_domains: int
    scaleup_switches: int | None
    endpoints: int | None
    levels: int | None
    switches: list[int] = field(default_factory=list)  # by level, leaf first
    links: list[int] = field(default_factory=list)  # into each level from below
    transceivers_by_level: list[int] = field(default_factory=list)  # optics of those links
    transceivers: int | None = None
    network_W: float | None = None
    unknown: str = ""  # why some figures are missing

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fat_tree(endpoints: int, radix: int, oversubscription: float = 1.0
             ) -> tuple[list[int], list[int]]:
    """Switches per level (leaf first) and links into each level, for ``endpoints`` ports
    on radix-``radix`` switches (module docstring)."""
    if radix < 2 or endpoints < 1:
        raise ConfigError("fabric.switch_radix", radix, "an integer >= 2 with >= 1 endpoint")
    up = math.ceil(radix / (1.0 + oversubscription))
    down = radix - up
    if down < 1:
        raise ConfigError("oversubscription", oversubscription, "leaves no down port")
    levels = 1
    while radix * down ** (levels - 1) < endpoints:
        levels += 1
        if levels > MAX_LEVELS:
            raise ConfigError("fabric.switch_radix", radix,
                              f"needs over {MAX_LEVELS} levels for {endpoints} endpoints")
    switches, links, below = [], [endpoints], endpoints
    for j in range(1, levels + 1):
        d = radix if j == levels else down
        switches.append(math.ceil(below / d))
        if j < levels:
            below = switches[-1] * up
            links.append(below)
    return switches, links


def bill_of_materials(t: TopologyConfig, num_gpus: int) -> Bom:
    """The bill of materials of ``num_gpus`` GPUs of ``t`` (module docstring)."""
    f = t.fabric
    per_node = t.reliability.gpus_per_node or t.tiers[0].size
    domains = -(-num_gpus // t.tiers[0].size)
    common = {"nodes": -(-num_gpus // per_node),
              "racks": -(-num_gpus // f.gpus_per_rack) if f.gpus_per_rack else None,
              "scaleup_domains": domains,
              "scaleup_switches": (None if f.scaleup_switches_per_domain is None
                                   else domains * f.scaleup_switches_per_domain)}
    if len(t.tiers) < 2 or num_gpus <= t.tiers[0].size:
        return Bom(**common, endpoints=0, levels=0, transceivers=0, network_W=0.0)
    if f.switch_radix is None or f.port_Gbps is None:
        return Bom(**common, endpoints=None, levels=None,
                   unknown="fabric.switch_radix / fabric.port_Gbps not given")
    ports = math.ceil(t.tiers[1].bandwidth_GBps * 8 / f.port_Gbps - 1e-9)
    endpoints = num_gpus * ports
    switches, links = fat_tree(endpoints, f.switch_radix, t.tiers[-1].oversubscription)
    nic = math.ceil(endpoints / f.nic_transceiver_ports)
    # optics of the links into each level: level 1 a NIC end and a switch end per link,
    # higher levels two switch ends per link
    switch_side = [math.ceil(links[0] / f.transceiver_ports)] + [
        math.ceil(2 * n / f.transceiver_ports) for n in links[1:]]
    by_level = [switch_side[0] + nic, *switch_side[1:]]
    watts = None
    if None not in (f.switch_power_W, f.transceiver_power_W, f.nic_transceiver_power_W):
        watts = (sum(switches) * f.switch_power_W + sum(switch_side) * f.transceiver_power_W
                 + nic * f.nic_transceiver_power_W)
    return Bom(**common, endpoints=endpoints, levels=len(switches), switches=switches,
               links=links, transceivers_by_level=by_level, transceivers=sum(by_level),
               network_W=watts,
               unknown="" if watts is not None else "fabric power figures not given")


def bom_columns(b: Bom, max_levels: int = 3) -> dict[str, Any]:
    """Flat row columns: ``switches_L1``.., ``links_L1``.., ``transceivers_L1``..
    (``None`` when unknown)."""
    out: dict[str, Any] = {"nodes": b.nodes, "racks": b.racks,
                           "scaleup_switches": b.scaleup_switches,
                           "fabric_levels": b.levels}
    for j in range(max(max_levels, len(b.switches))):
        known = b.levels is not None
        out[f"switches_L{j + 1}"] = (b.switches[j] if j < len(b.switches) else 0) if known \
            else None
        out[f"links_L{j + 1}"] = (b.links[j] if j < len(b.links) else 0) if known else None
        out[f"transceivers_L{j + 1}"] = (b.transceivers_by_level[j] if j < len(
            b.transceivers_by_level) else 0) if known else None
    out["transceivers"] = b.transceivers
    out["network_kW"] = None if b.network_W is None else b.network_W / 1e3
    out["bom_unknown"] = b.unknown
    return out
