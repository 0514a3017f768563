"""Chrome / Perfetto trace: schema, exact event counts, no overlaps, clipping, CLI."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.cli import main as cli
from simulator.engine import Record
from simulator.report.figures import simulate_run
from simulator.report.trace import THREADS, chrome_trace
from simulator.workload.cost import Phase, TimedOp

TID = {k: v[0] for k, v in THREADS.items()}
TWO_BY_TWO = {"parallelism.pipeline": 2, "training.global_batch_size": 4,
              "training.micro_batch_size": 2, "parallelism.data": 1}


@pytest.fixture(scope="module")
def run_2x2():
    return simulate_run("tiny", "dgx-h100", TWO_BY_TWO)


@pytest.fixture(scope="module")
def trace_2x2(run_2x2):
    return chrome_trace(run_2x2.plan, run_2x2.engine, run_2x2.result)


def check_schema(trace: dict) -> None:
    """What chrome://tracing and Perfetto need to open the file."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    json.loads(json.dumps(trace))  # plain JSON types only
    named_p, named_t, used = set(), set(), set()
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "M", "s", "f")
        assert type(e["pid"]) is int and type(e["tid"]) is int
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index")
            assert isinstance(e["args"], dict)
            if e["name"] == "process_name":
                named_p.add(e["pid"])
            if e["name"] == "thread_name":
                named_t.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0
            assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
            used.add((e["pid"], e["tid"]))
        else:
            assert "id" in e
    assert used <= named_t and {p for p, _ in used} <= named_p


def overlaps(trace: dict, eps: float = 1e-6) -> list[tuple]:
    """Pairs of X events on one thread that overlap without one containing the other."""
    lanes = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            lanes[(e["pid"], e["tid"])].append(e)
    bad = []
    for key, evs in lanes.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []  # ends of the open enclosing slices
        for e in evs:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1] <= start + eps:
                stack.pop()
            if stack and end > stack[-1] + eps:
                bad.append((key, e["name"]))
            stack.append(end)
    return bad


def count(trace: dict, pid: int, stream: str, ph: str = "X") -> int:
    return sum(1 for e in trace["traceEvents"]
               if e["ph"] == ph and e["pid"] == pid and e["tid"] == TID[stream])


def test_schema(trace_2x2):
    check_schema(trace_2x2)
    names = {e["args"]["name"] for e in trace_2x2["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute", "TP comm", "PP send/recv", "optimizer"} <= names
    procs = [e for e in trace_2x2["traceEvents"] if e["name"] == "process_name"]
    assert [p["args"]["name"].split(" (")[0] for p in procs] == ["stage 0", "stage 1"]


def test_event_counts_2_stages_2_microbatches(run_2x2, trace_2x2):
    plan = run_2x2.plan
    assert run_2x2.result.plan["microbatches"] == 2  # 4 sequences / (2 per mb * DP1)
    for stage, pid in ((0, 1), (1, 2)):
        layers = plan.partition.stage_layers(stage)
        assert layers == 2
        # TP2 with sequence parallelism: all-gather + reduce-scatter around attention
        # and around the MLP, forward and backward, and in the backward the re-gather of
        # each block's sharded input for its weight gradient (Korthikanti 2022); the last
        # stage adds the all-gather before the logits GEMM, its backward and re-gather.
        last = 1 if stage == 1 else 0
        tp_per = {"F": 4 * layers + last, "B": 6 * layers + 2 * last}
        assert count(trace_2x2, pid, "tp") == 2 * (tp_per["F"] + tp_per["B"])
        kernels = sum(sum(o.stream == "compute" for o in plan.phases[(ph, stage, 0)].ops)
                      for ph in ("F", "B"))
        for ph in ("F", "B"):
            assert len(plan.phases[(ph, stage, 0)].ops) == \
                tp_per[ph] + sum(o.stream == "compute" for o in plan.phases[(ph, stage, 0)].ops)
        # 2 micro-batches x (F + B) phase slices, each with its kernels nested inside
        assert count(trace_2x2, pid, "compute") == 2 * 2 + 2 * kernels
        assert count(trace_2x2, pid, "pp") == 2  # 2 activations forward, or 2 gradients back
        assert count(trace_2x2, pid, "pp", "s") == 2
        assert count(trace_2x2, pid, "dp") == 0  # DP1: nothing to reduce or gather
        assert count(trace_2x2, pid, "optimizer") == 1
        assert count(trace_2x2, pid, "cp") == count(trace_2x2, pid, "ep") == 0
    sends = [e["name"] for e in trace_2x2["traceEvents"] if e.get("cat") == "pp" and
             e["ph"] == "X"]
    assert sorted(sends) == ["send activation mb 0 -> stage 1", "send activation mb 1 -> stage 1",
                             "send gradient mb 0 -> stage 0", "send gradient mb 1 -> stage 0"]


def test_phase_slices_match_engine_records(run_2x2, trace_2x2):
    recs = [r for r in run_2x2.engine.records if r.stream == "compute"]
    slices = sorted((e for e in trace_2x2["traceEvents"] if e.get("cat") in
                     ("forward", "backward")), key=lambda e: (e["pid"], e["ts"]))
    recs.sort(key=lambda r: (r.stage, r.start))
    assert len(slices) == len(recs) == 8
    for e, r in zip(slices, recs, strict=True):
        assert e["pid"] == r.stage + 1 and e["args"]["microbatch"] == r.mb
        assert e["ts"] == pytest.approx(r.start * 1e6, abs=1e-3)
        assert e["dur"] == pytest.approx((r.end - r.start) * 1e6, abs=2e-3)
    flops = [e["args"]["flops"] for e in trace_2x2["traceEvents"] if e.get("cat") == "kernel"]
    assert sum(flops) > 0


def test_no_overlap_on_any_thread(trace_2x2):
    assert overlaps(trace_2x2) == []


def test_data_parallel_events():
    run = simulate_run("tiny", "dgx-h100", {"parallelism.data": 2})
    trace = chrome_trace(run.plan, run.engine, run.result)
    check_schema(trace)
    ei = run.plan.engine_input
    for s in range(2):
        buckets = sum(len(b) for b in ei.dp_buckets[s])
        assert buckets >= 1 and ei.param_gather[s] > 0
        assert count(trace, s + 1, "dp") == buckets + 1  # + the parameter all-gather
    assert overlaps(trace) == []


def test_interleaved_with_tp_overlap_has_no_overlaps():
    run = simulate_run("tiny", "dgx-h100", {"parallelism.pipeline_schedule": "interleaved",
                                            "parallelism.virtual_pipeline": 2,
                                            "training.tp_comm_overlap": True})
    trace = chrome_trace(run.plan, run.engine, run.result)
    check_schema(trace)
    assert overlaps(trace) == []
    chunks = {e["args"]["chunk"] for e in trace["traceEvents"] if e.get("cat") == "forward"}
    assert chunks == {0, 1}


def test_phase_detail_has_no_kernels(run_2x2):
    trace = chrome_trace(run_2x2.plan, run_2x2.engine, detail="phase")
    cats = Counter(e.get("cat") for e in trace["traceEvents"] if e["ph"] == "X")
    assert cats["forward"] == cats["backward"] == 4 and cats["kernel"] == cats["tp"] == 0


def test_overlapping_collectives_are_clipped():
    ops = [TimedOp("gemm_a", "compute", 0.0, 8e-6, 1e9, 0.0),
           TimedOp("ag", "tp", 0.0, 10e-6, 0.0, 1e6),
           TimedOp("rs", "tp", 5e-6, 10e-6, 0.0, 1e6),  # starts before "ag" ends
           TimedOp("gemm_b", "compute", 8e-6, 12e-6, 1e9, 0.0)]
    plan = SimpleNamespace(
        phases={("F", 0, 0): Phase(duration=20e-6, ops=ops)},
        engine_input=SimpleNamespace(schedule=[[]], fwd=np.zeros((1, 1, 1))),
        partition=SimpleNamespace(stage_layers=lambda s: 1),
        workload=SimpleNamespace(model=SimpleNamespace(name="x")),
        topo=SimpleNamespace(name="y"))
    engine = SimpleNamespace(records=[Record(0, "compute", "F", 1e-6, 21e-6, 0, 0)],
                             step_time=21e-6)
    trace = chrome_trace(plan, engine)
    check_schema(trace)
    ev = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert ev["ag"]["ts"] == 1.0 and ev["ag"]["dur"] == 10.0
    assert ev["rs"]["ts"] == 11.0 and ev["rs"]["dur"] == 5.0
    assert ev["rs"]["args"]["clipped_us"] == 5.0
    assert ev["gemm_b"]["ts"] == 9.0 and ev["gemm_b"]["ts"] + ev["gemm_b"]["dur"] == 21.0
    assert overlaps(trace) == []


@pytest.fixture
def trace_cli(monkeypatch):
    return cli.main


def test_cli_writes_valid_json(trace_cli, tmp_path):
    out = tmp_path / "t.json"
    assert trace_cli(["trace", "tiny", "--topology", "dgx-h100", "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    check_schema(trace)
    assert overlaps(trace) == []
    assert trace["otherData"]["workload"] == "tiny-gpt"
    assert list(tmp_path.iterdir()) == [out]  # the temporary file was renamed, not left
    # the events are the ideal replay; the summary also carries the expected step
    from simulator import simulate
    r = simulate("tiny", "dgx-h100")
    info = trace["otherData"]
    assert info["step_time_s"] == r.step_time_ideal_s
    assert info["step_time_expected_s"] == r.step_time_s > r.step_time_ideal_s
    # (trace times are microseconds rounded to 3 decimals)
    assert max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X") \
        <= r.step_time_ideal_s * 1e6 + 2e-3


def test_cli_errors_exit_2(trace_cli, tmp_path, capsys):
    out = str(tmp_path / "t.json")
    assert trace_cli(["trace", "no-such-model", "--topology", "dgx-h100", "-o", out]) == 2
    assert trace_cli(["trace", "tiny", "--topology", "dgx-h100", "-o",
                      str(tmp_path / "t.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("clustersim: error:") for line in err)
    assert not (tmp_path / "t.json").exists()


def test_registered():
    assert cli.COMMANDS["trace"][0] == "simulator.cli.trace"


def test_write_trace_writes_what_one_dumps_gives(tmp_path, monkeypatch):
    """One ``json.dumps`` and one write (issue 33.7): never ``json.dump``'s chunked writes."""
    import json as _json

    from simulator.report import trace as trace_mod

    monkeypatch.setattr(_json, "dump", lambda *a, **k: pytest.fail("json.dump used"))
    doc = {"traceEvents": [{"ph": "X", "ts": 1.5, "name": "f"}], "a": [1, 2]}
    path = trace_mod.write_trace(tmp_path / "t.json", doc)
    assert path.read_text() == _json.dumps(doc, separators=(",", ":"))
