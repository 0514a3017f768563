"""training.attention_family: triton, FlashAttention in Triton (flash-attention's
flash_attn_triton.py, llm-foundry's attn_impl: triton): A100 only, at Dao 2023's ratios to
FlashAttention-2 (simulator/compute/attention.py)."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve
from simulator.cli.main import main
from simulator.compute.attention import TRITON_VS_FA2_A100, fwd_bwd_rate, kernel_efficiency
from simulator.config import load_topology
from simulator.hardware import Topology
from simulator.workload.chunk_cost import ChunkCoster

FSDP8 = {"training.stack": "composer", "parallelism.tensor": 1, "parallelism.data": 8,
         "training.use_megatron_fsdp": True,
         "training.data_parallel_sharding_strategy": "optim_grads_params",
         "training.micro_batch_size": 1, "training.global_batch_size": 8,
         "model.seq_length": 8192, "training.recompute": "full"}


def _gpu(name):
    return Topology.from_config(load_topology(name)).gpu


def test_triton_runs_at_dao_2023s_ratios_to_flash_attention_2_on_a100():
    fwd, bwd = TRITON_VS_FA2_A100
    assert 1 / 1.5 <= fwd <= 1 / 1.3 and bwd == pytest.approx(1 / 2)  # Sec. 4.1
    ratio = fwd_bwd_rate(fwd, bwd)
    assert ratio == pytest.approx(0.547, abs=0.001)
    a100 = _gpu("dgx-a100")
    for s, d, causal in ((2048, 128, True), (8192, 128, True), (4096, 64, False)):
        assert kernel_efficiency("triton", a100, s, d, causal) == pytest.approx(
            ratio * kernel_efficiency("fa2", a100, s, d, causal))


def test_triton_attention_lengthens_only_the_attention_time():
    fa2 = simulate("llama3-8b", "dgx-a100", {**FSDP8, "training.attention_family": "fa2"})
    tri = simulate("llama3-8b", "dgx-a100", {**FSDP8, "training.attention_family": "triton"})
    assert tri.step_time_s > fa2.step_time_s
    ops = {}
    for family in ("fa2", "triton"):
        w, t = resolve("llama3-8b", "dgx-a100", {**FSDP8, "training.attention_family": family})
        fwd, _ = ChunkCoster(w, Topology.from_config(t)).dense
        ops[family] = {o.name: o.duration for o in fwd.ops}
    ratio = fwd_bwd_rate(*TRITON_VS_FA2_A100)
    for name, seconds in ops["fa2"].items():
        if name == "attention":  # the kernel's rate, plus the same per-kernel launch cost
            assert ops["triton"][name] == pytest.approx(seconds / ratio, rel=2e-3)
        else:
            assert ops["triton"][name] == seconds, name


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-b200"])
def test_triton_has_no_figure_beyond_a100(topology, capsys):
    with pytest.raises(ConfigError, match="A100 only"):
        simulate("llama3-8b", topology, {**FSDP8, "training.attention_family": "triton"})
    argv = ["run", "llama3-8b", "-t", topology, "--set", "training.attention_family=triton"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "training.attention_family" in err and "Traceback" not in err


def test_the_three_lists_of_attention_families_agree():
    # the kernel model, the stack profiles and the schema each name the families (the config
    # package cannot import the kernel model without a cycle): they must stay one list
    from typing import get_args

    from simulator.compute.attention import FAMILIES as KERNELS
    from simulator.config.stacks import FAMILIES as PROFILES
    from simulator.config.workload import TrainingConfig

    schema = set(get_args(get_args(TrainingConfig.model_fields["attention_family"]
                                   .annotation)[0]))
    assert set(KERNELS) == set(PROFILES) == schema
