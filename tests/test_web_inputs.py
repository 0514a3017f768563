"""The web server's inputs and bounds, without a server: names, YAML text, path refusal,
the same errors as the CLI, the worker pool's time budget and the bounded cache."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.web import compute, inputs
from simulator.web.inputs import resolve_request
from simulator.web.pool import LRU, Busy, OverBudget, WorkerPool

TINY = Path(__file__).resolve().parents[1] / "workloads" / "tiny.yaml"


def _cli_error(argv: list[str]) -> str:
    out = subprocess.run([sys.executable, "-m", "simulator", *argv], capture_output=True,
                         text=True)
    assert out.returncode == 2
    return out.stderr.strip().removeprefix("clustersim: error: ")


def test_run_is_the_cli_json_byte_for_byte():
    body = {"workload": "llama3-70b", "topology": "dgx-h100",
            "overrides": {"parallelism.tensor": 4, "training.micro_batch_size": 2}}
    cli = subprocess.run([sys.executable, "-m", "simulator", "run", "llama3-70b", "-t",
                          "dgx-h100", "--set", "parallelism.tensor=4", "--set",
                          "training.micro_batch_size=2", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    assert compute.run(body) == cli
    assert json.loads(cli)["plan"]["tp"] == 4


@pytest.mark.parametrize(("overrides", "argv"), [
    ({"parallelism.tensor": 3}, ["--set", "parallelism.tensor=3"]),
    ({"training.precision": "fp7"}, ["--set", "training.precision=fp7"]),
    ({"parallelism.tensr": 2}, ["--set", "parallelism.tensr=2"]),
])
def test_bad_override_is_the_cli_message(overrides, argv):
    with pytest.raises(ConfigError) as exc:
        resolve_request({"workload": "llama3-70b", "topology": "dgx-h100",
                         "overrides": overrides})
    assert exc.value.message() == _cli_error(["run", "llama3-70b", "-t", "dgx-h100", *argv])


def test_yaml_text_is_a_document_with_lines():
    text = TINY.read_text()
    w, _ = resolve_request({"workload": text, "topology": "dgx-h100"})
    assert w.model.name == "tiny-gpt"
    bad = text.replace("num_layers:", "num_layerz:")
    with pytest.raises(ConfigError) as exc:
        resolve_request({"workload": bad, "topology": "dgx-h100"})
    assert exc.value.source.startswith("workload.yaml:")
    assert "did you mean 'num_layers'" in exc.value.message()


@pytest.mark.parametrize("ref", ["/etc/passwd", "../workloads/tiny", "workloads/tiny.yaml",
                                 "tiny.yaml", "TINY", ""])
def test_only_shipped_names_never_a_path(ref):
    with pytest.raises(ConfigError) as exc:
        resolve_request({"workload": ref, "topology": "dgx-h100"})
    assert exc.value.field == "workload"


def test_fields_that_name_a_server_file_are_refused(tmp_path):
    secret = tmp_path / "config.json"
    secret.write_text("{}")
    text = f"model: {{hf_config: {secret}}}\ntraining: {{global_batch_size: 8}}\n"
    with pytest.raises(ConfigError, match="names a file on the server") as exc:
        resolve_request({"workload": text, "topology": "dgx-h100"})
    assert exc.value.field == "model.hf_config"
    for key in ("model.moe.router_trace", "model.hf_config", "model"):
        with pytest.raises(ConfigError, match="names a file on the server"):
            resolve_request({"workload": "mixtral-8x7b", "topology": "dgx-h100",
                             "overrides": {key: str(secret)}})


def test_text_over_one_megabyte_is_refused():
    text = "# " + "x" * 1_000_001 + "\nmodel: {}\n"
    with pytest.raises(ConfigError, match="larger than 1 MB"):
        resolve_request({"workload": text, "topology": "dgx-h100"})


def test_detail_has_stages_timeline_and_fields():
    d = compute.detail({"workload": "llama3-70b", "topology": "dgx-h100",
                        "topology_overrides": {"tiers.1.bandwidth_GBps": 25}})
    assert len(d["memory_stages"]) == d["result"]["plan"]["pp"] == d["timeline"]["stages"]
    assert max(s["total_GB"] for s in d["memory_stages"]) == pytest.approx(
        d["result"]["memory_per_gpu_GB"])
    assert {s[1] for s in d["timeline"]["spans"]} >= {"F", "B"}
    assert d["fields"]["topology:tiers.1.bandwidth_GBps"] == 25
    assert "bandwidth_GBps: 25" in d["yaml"]["topology"]
    assert "tensor: 8" in d["yaml"]["workload"]
    # the software stack is an editor field, offered from the shipped profiles
    tt = compute.detail({"workload": "llama3-8b", "topology": "dgx-h100",
                         "overrides": {"training.stack": "torchtitan"}})
    assert tt["fields"]["training.stack"] == "torchtitan"
    assert "torchtitan" in inputs.shipped()["stacks"]
    # so is LoRA fine-tuning: the frozen base drops the gradients and optimizer states
    lora = compute.detail({"workload": "llama3-8b", "topology": "dgx-h100",
                           "overrides": {"training.peft": "lora"}})
    full = compute.detail({"workload": "llama3-8b", "topology": "dgx-h100"})
    assert lora["fields"]["training.peft"] == "lora" and full["fields"]["training.peft"] == "none"
    assert lora["result"]["plan"]["peft"] == "lora"
    assert lora["result"]["memory_per_gpu_GB"] < full["result"]["memory_per_gpu_GB"]


def test_lru_is_bounded_and_keeps_the_recent():
    cache = LRU(3)
    for i in range(10):
        cache.put(str(i), i)
        cache.get("0") if i < 3 else None
    assert len(cache) == 3 and cache.get("9") == 9 and cache.get("0") is None
    sized = LRU(100, max_bytes=1000)
    for i in range(10):
        sized.put(str(i), "x" * 300, 300)
    assert len(sized) == 3 and sized.bytes == 900 and sized.get("9") is not None
    sized.put("big", "x", 5000)  # larger than the whole cache: not kept
    assert sized.get("big") is None and sized.bytes == 900


def test_pool_time_budget_replaces_the_worker_and_serves_on():
    body = {"workload": "llama3-405b", "topology": "dgx-h100"}

    async def go():
        pool = WorkerPool(workers=1, timeout_s=0.001, queue=0, context="spawn")
        try:
            first = pool._all[0]
            with pytest.raises(OverBudget):
                await pool.call("detail", body)
            assert pool._all[0] is not first and not first.proc.is_alive()
            pool.timeout_s = 60
            busy = asyncio.ensure_future(pool.call("run", {**body, "workload": "tiny"}))
            await asyncio.sleep(0)
            with pytest.raises(Busy):  # one worker busy, a queue of 0: refused at once
                await pool.call("run", body)
            status, text = await busy
            assert status == "ok" and json.loads(text)["workload"] == "tiny-gpt"
            status, payload = await pool.call("run", {**body, "overrides": {"x.y": 1}})
            assert status == "error" and payload["field"] == "x"
        finally:
            pool.close()

    asyncio.run(go())


def test_serve_without_the_extra_names_the_pip_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "starlette", None)  # as if not installed
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert 'pip install "clustersim[web]"' in err and len(err.strip().splitlines()) == 1


def test_timeline_is_the_simpy_replays_compute_lane():
    from simulator.api import simulate_resolved

    body = {"workload": "llama3-70b", "topology": "dgx-h100",
            "overrides": {"training.global_batch_size": 32}}
    spans = compute.detail(body)["timeline"]["spans"]
    _, _, engine = simulate_resolved(*resolve_request(body), keep_records=True,
                                     variability=False)
    ref = compute.timeline(engine, 4)["spans"]
    assert sorted(map(tuple, spans)) == sorted(map(tuple, ref)) and len(ref) > 100


def test_serve_on_a_port_in_use_is_one_line_exit_2(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["serve", "--port", str(s.getsockname()[1])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clustersim: error: --port = ") and "cannot listen" in err
    assert len(err.splitlines()) == 1


def test_a_recipes_layout_is_a_field_the_page_can_clear():
    """DeepSeek-V3 ships its recipe's layout; a page that changes the pipeline gets the
    CLI's message, and clearing the layout field (null) gives the simulator's split."""
    body = {"workload": "deepseek-v3", "topology": "dgx-h100",
            "overrides": {"parallelism.pipeline": 4}}
    with pytest.raises(ConfigError, match="pipeline_model_parallel_layout"):
        resolve_request(body)
    body["overrides"]["parallelism.pipeline_model_parallel_layout"] = None
    w, _ = resolve_request(body)
    assert w.parallelism.pipeline == 4 and w.parallelism.pipeline_model_parallel_layout is None
    fields = compute.detail({"workload": "deepseek-v3", "topology": "dgx-h100"})["fields"]
    assert fields["parallelism.pipeline_model_parallel_layout"] == "Et|(tt|)*30mL"
