"""The page's capacity tab is wired to :func:`simulator.capacity`: called with the exact
signature, its frame turned into rows (a fake, monkeypatched into the job module), and the
real planner answers through the same job on a small grid.

The app runs in-process (Starlette's TestClient) with fork-started workers, so the fake
monkeypatched here is the one the job process calls.
"""

from __future__ import annotations

import sys
import time
import warnings

import pytest

pytest.importorskip("starlette", reason="clustersim serve needs the web extra")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
if sys.platform != "linux":
    pytest.skip("fork-started workers (Linux) carry the monkeypatched fake",
                allow_module_level=True)

with warnings.catch_warnings():  # Starlette 1.x: "use httpx2"; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

import simulator.web.jobs as jobs
from simulator.web.app import create_app

CALLS: list = []


def fake_capacity(workload, tokens, topologies, gpus, *, prices=None, deadline_days=None,
                  budget_usd=None, overrides=None, progress=False):
    import pandas as pd

    CALLS.append((workload, tokens, topologies, gpus, prices, deadline_days, budget_usd,
                  overrides, progress))
    rows = [{"topology": t, "num_gpus": g, "overrides": {"parallelism.data": g // 8},
             "step_time_s": 10.0 / g, "days": tokens / 1e12 / g, "gpu_hours": 24.0 * g,
             "cost_usd": 2.0 * g, "on_frontier": g == max(gpus)}
            for t in topologies for g in gpus]
    return pd.DataFrame(rows)


def run_job(client: TestClient, body: dict) -> dict:
    job_id = client.post("/api/jobs", json={"kind": "capacity", **body}).json()["id"]
    for _ in range(600):
        view = client.get(f"/api/jobs/{job_id}").json()
        if view["state"] != "running":
            return view
        time.sleep(0.05)
    raise AssertionError("capacity job did not finish")


def test_capacity_is_called_with_its_signature(monkeypatch):
    monkeypatch.setattr(jobs, "capacity", fake_capacity)
    body = {"workload": "llama3-70b", "topology": "dgx-h100", "overrides": {},
            "tokens": 2e12, "topologies": ["dgx-h100", "gb200-nvl72"], "gpus": [64, 128],
            "deadline_days": 30, "budget_usd": None}
    with TestClient(create_app(workers=1, context="fork")) as client:
        assert client.get("/api/shipped").json()["capacity"] is True
        view = run_job(client, body)
        assert view["state"] == "done", view
        rows = view["result"]["rows"]
        assert [(r["topology"], r["num_gpus"]) for r in rows] == [
            ("dgx-h100", 64), ("dgx-h100", 128), ("gb200-nvl72", 64), ("gb200-nvl72", 128)]
        assert rows[1]["overrides"] == {"parallelism.data": 16} and rows[1]["on_frontier"]
        assert "overrides" not in view["result"]["columns"]
        assert "cost_usd" in view["result"]["columns"]
        bad = run_job(client, {**body, "topologies": ["dgx-h100", "/etc"]})
        assert bad["state"] == "error" and bad["field"] == "topology"


def test_capacity_arguments_reach_the_call(monkeypatch, tmp_path):
    from simulator.web.jobs import capacity_job

    CALLS.clear()
    monkeypatch.setattr(jobs, "capacity", fake_capacity)
    out = capacity_job({"workload": "llama3-70b", "topology": "dgx-h100",
                        "overrides": {"training.global_batch_size": 256}, "tokens": 1e12,
                        "topologies": ["dgx-h100"], "gpus": [64], "budget_usd": 5e6,
                        "prices": {"dgx-h100": 2.5}}, lambda *a: None)
    assert CALLS == [("llama3-70b", 1e12, ["dgx-h100"], [64], {"dgx-h100": 2.5}, None, 5e6,
                      {"training.global_batch_size": 256}, False)]
    assert out["rows"][0]["num_gpus"] == 64


def test_the_real_planner_answers_through_the_job():
    out = jobs.capacity_job({"workload": "tiny", "topology": "dgx-h100", "tokens": 1e9,
                             "topologies": ["dgx-h100"], "gpus": [8],
                             "prices": {"dgx-h100": 2.0}}, lambda *a: None)
    (row,) = out["rows"]
    assert row["topology"] == "dgx-h100" and row["num_gpus"] == 8
    assert row["cost_usd"] == row["gpu_hours"] * 2.0
