"""Kernel-timings CSV: what ``clustersim bench-kernels`` writes is what ``calibrate`` reads, and
bench-kernels fails cleanly (one line, exit 2) where torch or a GPU is missing. The benchmark
itself needs a GPU and is not run here."""

from __future__ import annotations

import builtins
import sys

import pytest

from simulator.calibrate import bench, kernels
from simulator.calibrate.detect import read_one
from simulator.cli.main import main as cli
from simulator.errors import ConfigError


def test_bench_csv_is_what_calibrate_reads(tmp_path):
    rows = [{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time": 2.1e-4,
             "device": "NVIDIA H100 80GB HBM3"},
            {"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "fp8", "time": 8.0e-4,
             "device": "NVIDIA H100 80GB HBM3"},
            {"op": "attention", "batch": 1, "heads": 32, "seq": 4096, "head_dim": 128,
             "causal": "true", "kernel": "fwd_bwd", "time": 3.3e-3, "device": "x"}]
    text = bench.to_csv(rows)
    assert text.splitlines()[0] == ",".join(kernels.HEADER)
    path = tmp_path / "bench.csv"
    path.write_text(text)
    m = read_one(path, {})
    assert [(g.m, g.dtype, g.seconds) for g in m.gemms] == [(4096, "bf16", 2.1e-4),
                                                           (8192, "fp8", 8.0e-4)]
    (a,) = m.attention
    assert (a.seq, a.causal, a.kernel, a.kernels) == (4096, True, "fwd_bwd", 2)
    assert a.flops == pytest.approx(4 * 32 * 4096**2 * 128 * 0.5 * 3.5)


def test_bench_kernels_without_torch_is_one_clean_line(monkeypatch, capsys, tmp_path):
    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *a, **k)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    out = tmp_path / "k.csv"
    assert cli(["bench-kernels", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "clustersim[bench]"' in err
    assert not out.exists()


def test_bench_kernels_without_a_gpu(monkeypatch):
    class Cuda:
        @staticmethod
        def is_available():
            return False

    class FakeTorch:
        cuda = Cuda

    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    with pytest.raises(ConfigError, match="needs a GPU visible to torch"):
        bench.torch_and_device()


@pytest.mark.parametrize(("text", "match"), [
    ("m,n,k,time\n1,2,3,1e-3\n", r"k.csv:1: columns .*missing dtype"),
    ("m,n,k,dtype\n1,2,3,bf16\n", r"k.csv:1: columns .*needs a time column"),
    ("m,n,k,dtype,time\n1,2,3,int4,1e-3\n", r"k.csv:2: dtype = 'int4'"),
    ("m,n,k,dtype,time_us\n1,2,3,bf16,abc\n", r"k.csv:2: time_us = 'abc': must be a number"),
    ("op,batch,heads,seq,head_dim,causal,kernel,time\nattention,1,2,3,4,maybe,fwd,1\n",
     r"k.csv:2: causal = 'maybe'"),
])
def test_bad_kernel_csv_names_file_and_line(tmp_path, text, match):
    path = tmp_path / "k.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_one(path, {})


def test_time_units_are_converted(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text("m,n,k,dtype,time_ms\n4096,4096,4096,bf16,0.25\n")
    assert read_one(path, {}).gemms[0].seconds == pytest.approx(2.5e-4)
    assert kernels.looks_like(path.read_text())


def test_attention_rows_are_costed_as_a_training_step_costs_them():
    # a timed attention call is predicted at the same kernel efficiency the step uses (the
    # architecture's tile fill and head-dim factor), so a calibrated attention_efficiency
    # means what the topology's does: on H100 / B200 the kernel's saturated rate
    from simulator.calibrate.measurements import AttentionPoint
    from simulator.compute import attention_time
    from simulator.compute.attention import kernel_efficiency
    from simulator.config import load_topology
    from simulator.hardware import Topology

    for name in ("dgx-h100", "dgx-b200", "dgx-a100"):
        gpu = Topology.from_config(load_topology(name)).gpu
        for seq, d in ((2048, 128), (16384, 64)):
            p = AttentionPoint(1, 32, seq, d, True, "fwd_bwd", 0.0, "")
            eff = kernel_efficiency("te", gpu, seq, d, True)
            assert p.seconds_on(gpu) == pytest.approx(
                attention_time(p.flops, gpu, eff) + gpu.kernel_overhead_s)
    # short sequences run below the saturated rate on Hopper: 2K is slower per FLOP than 16K
    h100 = Topology.from_config(load_topology("dgx-h100")).gpu
    short, long_ = (AttentionPoint(1, 32, s, 128, True, "fwd", 0.0, "") for s in (2048, 16384))
    assert short.seconds_on(h100) / short.flops > long_.seconds_on(h100) / long_.flops
