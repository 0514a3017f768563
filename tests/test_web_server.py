"""`clustersim serve` as a user runs it: a real server on a loopback port.

GET / is the page; POST /api/run is exactly `clustersim run --format json`; a bad override
is a 400 with the CLI's one-line message; oversized bodies are refused; 200 concurrent
requests (loopback only, bounded in count) leave it serving with its memory flat; search
jobs report progress and can be cancelled; capacity is wired to `simulator.capacity`.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="clustersim serve needs the web extra")
pytest.importorskip("uvicorn", reason="clustersim serve needs the web extra")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*extra: str) -> tuple[subprocess.Popen, str]:
    """``python -m simulator serve`` on a free loopback port; waits until it answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "serve", "--port", str(port),
                             *extra], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/api/shipped", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode()) from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("clustersim serve did not answer within 30 s")


@pytest.fixture(scope="module")
def server():
    proc, url = start_server()
    yield proc, url
    proc.terminate()
    proc.wait(10)


def post(url: str, body, timeout: float = 60) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *argv], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_page_and_its_files(server):
    _, url = server
    page = urllib.request.urlopen(url + "/").read().decode()
    assert "<title>clustersim" in page and "/static/app.js" in page
    for name in ("app.js", "style.css"):
        assert urllib.request.urlopen(f"{url}/static/{name}").status == 200
    for bad in ("/static/../inputs.py", "/static/index.html", "/static/%2e%2e%2fapp.py"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(url + bad)
        assert exc.value.code == 404


def test_run_answers_the_cli_json(server):
    _, url = server
    body = {"workload": "llama3-70b", "topology": "dgx-h100",
            "overrides": {"parallelism.tensor": 4, "training.global_batch_size": 256}}
    status, text = post(url + "/api/run", body)
    out = cli("run", "llama3-70b", "-t", "dgx-h100", "--set", "parallelism.tensor=4",
              "--set", "training.global_batch_size=256", "--format", "json")
    assert status == 200 and text.decode() == out.stdout
    assert json.loads(text)["plan"]["gbs"] == 256


def test_bad_override_is_400_with_the_cli_line(server):
    _, url = server
    status, text = post(url + "/api/run", {"workload": "llama3-70b", "topology": "dgx-h100",
                                           "overrides": {"parallelism.tensor": 3,
                                                         "training.micro_batch_size": 2}})
    out = cli("run", "llama3-70b", "-t", "dgx-h100", "--set", "parallelism.tensor=3",
              "--set", "training.micro_batch_size=2")
    assert out.returncode == 2
    assert status == 400
    assert json.loads(text) == {"error": out.stderr.strip().removeprefix("clustersim: error: ")}


def test_bodies_that_are_too_big_or_not_json(server):
    _, url = server
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/api/run")  # refused on its header, before the body is read
    conn.putheader("Content-Length", "1200000")
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    status, text = post(url + "/api/run", b"{not json")
    assert status == 400 and "not JSON" in json.loads(text)["error"]
    status, text = post(url + "/api/run", b"[" * 200_000 + b"]" * 200_000)
    assert status == 400 and "nested too deeply" in json.loads(text)["error"]
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/api/run", body=b'{"workload": "tiny", "topology": "dgx-h100"}',
                 headers={"Content-Type": "text/plain"})  # what another site's form sends
    assert conn.getresponse().status == 415
    conn.close()
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/", headers={"Host": "attacker.example"})  # a re-pointed DNS name
    assert conn.getresponse().status == 400
    conn.close()
    status, text = post(url + "/api/run", {"workload": "/etc/passwd", "topology": "dgx-h100"})
    assert status == 400 and "no such shipped name" in json.loads(text)["error"]


def rss_kB(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_200_concurrent_requests_leave_it_serving_with_flat_memory(server):
    proc, url = server

    def burst(offset: int) -> list[int]:
        bodies = [{"workload": "tiny", "topology": "dgx-h100",
                   "overrides": {"training.seed": offset + i % 40}} for i in range(200)]
        with ThreadPoolExecutor(max_workers=200) as pool:
            return list(pool.map(lambda b: post(url + "/api/run", b)[0], bodies))

    first = burst(0)
    before = rss_kB(proc.pid)
    second = burst(1000)
    after = rss_kB(proc.pid)
    for codes in (first, second):
        assert set(codes) <= {200, 503}  # served, or refused at once by the bounded queue
        assert codes.count(200) >= 32
    assert after - before < 20_000, f"RSS grew {after - before} kB over 200 requests"
    status, text = post(url + "/api/run", {"workload": "tiny", "topology": "dgx-h100"})
    assert status == 200 and json.loads(text)["workload"] == "tiny-gpt"


def poll(url: str, job_id: str, until: tuple[str, ...], limit: float = 120) -> dict:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        view = json.loads(urllib.request.urlopen(f"{url}/api/jobs/{job_id}").read())
        if view["state"] in until:
            return view
        time.sleep(0.2)
    raise AssertionError(f"job still {view['state']} after {limit} s")


def test_search_job_rows_load_into_run(server):
    _, url = server
    base = {"workload": "tiny", "topology": "dgx-h100", "overrides": {}}
    status, text = post(url + "/api/jobs", {"kind": "search", **base, "gpus": 8, "top": 3,
                                            "max_simulations": 20})
    assert status == 200
    view = poll(url, json.loads(text)["id"], ("done", "error"))
    assert view["state"] == "done", view
    assert view["progress"]["done"] == view["progress"]["total"] > 0
    rows = view["result"]["rows"]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    status, text = post(url + "/api/run", {**base, "overrides": rows[0]["overrides"]})
    assert json.loads(text)["step_time_s"] == pytest.approx(rows[0]["step_time_s"], rel=1e-9)


def test_job_cancel_and_bad_input(server):
    _, url = server
    status, text = post(url + "/api/jobs", {"kind": "search", "workload": "llama3-405b",
                                            "topology": "dgx-h100", "gpus": 2048})
    assert status == 200
    job_id = json.loads(text)["id"]
    req = urllib.request.Request(f"{url}/api/jobs/{job_id}", method="DELETE")
    assert json.loads(urllib.request.urlopen(req).read())["state"] == "cancelled"
    _, text = post(url + "/api/jobs", {"kind": "search", "workload": "tiny",
                                       "topology": "dgx-h100", "gpus": 0})
    view = poll(url, json.loads(text)["id"], ("done", "error"))
    assert view["state"] == "error" and view["field"] == "gpus"
    assert post(url + "/api/jobs", {"kind": "shell"})[0] == 400
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(f"{url}/api/jobs/not-a-job")
    assert exc.value.code == 404
