"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.config import load_topology
from simulator.hardware import Topology

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def h100() -> Topology:
    return Topology.from_config(load_topology("dgx-h100"))


@pytest.fixture(scope="session")
def a100() -> Topology:
    return Topology.from_config(load_topology("dgx-a100"))
