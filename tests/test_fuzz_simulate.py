"""Fuzz ``simulate`` with arbitrary workload and topology documents.

Property: every document either simulates to a result whose numbers are sane
(positive finite step time, bubble in [0, 1), no exposed communication longer
than the step, finite positive memory, no NaN or infinity anywhere) or raises
:class:`ConfigError` with a one-line message. Never another exception.

Documents are small (few layers, small hidden, small batch, so each
simulation takes milliseconds). Half are built to respect the cross-field
rules, half are drawn freely; then most are mutated: a number pushed to an
extreme (0, negative, 1e300, 2**63, NaN, infinity), any field set to a value of
the wrong type, a key deleted, or an unknown key added. About a quarter end
as results and the rest as ConfigErrors; the test checks both sides are
exercised. Derandomized, so CI sees the same 2,000 documents every run.

Every valid result also has ``hfu <= 1`` (the FLOPs its kernels execute never
exceed what the GPUs deliver), on fuzzed topologies and on every shipped one.

Bad input arrives in more forms than documents (:mod:`tests.fuzz_inputs`):
YAML text with control characters, impossible dates and bad tags, ``--set``
strings, over-long and very deep paths, deeply nested dicts, out-of-range CLI
options. Each must end in a ConfigError (one line, naming a field) or a result.

``CLUSTERSIM_FUZZ_EXAMPLES=10000 python -m pytest tests/test_fuzz_simulate.py``
runs 10,000 examples of each property (minutes); the default run keeps its
present size.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import pytest
from fuzz_inputs import cli_argv, deep_dict, override_text, path_text, yaml_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import ConfigError, simulate
from simulator.cli.main import main as cli_main
from simulator.config import load_workload, parse_override

BIG = os.environ.get("CLUSTERSIM_FUZZ_EXAMPLES")


def examples(default: int) -> int:
    """``default`` examples, or CLUSTERSIM_FUZZ_EXAMPLES when set (the long fuzz run)."""
    return int(BIG) if BIG else default


FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.filter_too_much,
                                   HealthCheck.function_scoped_fixture])

EVIL = st.one_of(
    st.sampled_from([0, -1, -8, 3, 7, 2**31, 2**63, 10**30, 1.5, -0.5, 1e-300, 1e300,
                     float("inf"), float("-inf"), float("nan"), "", "x", "8", True, False,
                     None, [], {}, [1], {"a": 1}]),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
)
EXTREME = st.sampled_from([0, -1, 1e-300, 1e300, float("inf"), float("-inf"), float("nan"),
                           2**63, 10**30, 10**6, 1e-9, 0.5])
ABSENT = object()  # an optional key left out of the document


def _fill(draw, out: dict, options: dict[str, list]) -> dict:
    """Set each optional key to one of its values, or leave it out (one draw per key)."""
    for key, values in options.items():
        value = draw(st.sampled_from([ABSENT, *values]))
        if value is not ABSENT:
            out[key] = copy.deepcopy(value)  # mutations must not reach the shared option
    return out


MOE = {"router_topk": [1, 2, 4], "ffn_hidden_size": [8, 96],
       "shared_expert_ffn_hidden_size": [0, 32], "layer_freq": [1, 2], "first_k_dense": [0, 3],
       "capacity_factor": [None, 1.25], "router_load": ["uniform", "skewed", "trace"],
       "router_trace": ["no-such-trace.csv"], "max_nodes_per_token": [1, 4],
       "router_skew": [0.0, 2.0], "balancing": ["none", "aux_loss", "aux_free_bias"],
       "token_dispatcher_type": ["flex"], "router_num_groups": [1, 2, 4],
       "router_group_topk": [1, 2]}
MODEL = {"kv_channels": [8, 64], "ffn_hidden_size": [8, 96, 256],
         "gated_linear_unit": [True, False], "untie_embeddings_and_output_weights": [True],
         "use_parallel_residual": [True]}
PARALLEL = {"context": [1, 2, 4, 3], "context_parallel_algo": ["ring", "ulysses", "hybrid"],
            "expert": [1, 2, 4, 8], "expert_tensor": [1, 2], "sequence_parallel": [True, False],
            "decoder_first_pipeline_num_layers": [1, 3],
            "decoder_last_pipeline_num_layers": [1, 2],
            "rank_order": ["tp-dp-ep-pp-cp"]}
TRAINING = {"micro_batch_size": [1, 2, 4], "recompute": ["selective", "full"],
            "precision": ["fp16", "fp8", "fp4"], "distributed_optimizer": [False],
            "overlap_grad_reduce": [False], "overlap_param_gather": [False],
            "tp_comm_overlap": [True], "use_flash_attn": [False], "seed": [1, 2**32],
            "use_megatron_fsdp": [True],
            "data_parallel_sharding_strategy": ["no_shard", "optim_grads", "optim_grads_params"],
            "keep_fp8_transpose_cache": [True], "cross_entropy_loss_fusion": [True],
            "cross_entropy_fusion_impl": ["te"],
            "num_distributed_optimizer_instances": [2, 4, 3],
            "outer_dp_sharding_strategy": ["optim"],
            "stack": ["torchtitan", "nemo-automodel", "deepspeed"], "loss_num_chunks": [8, 3],
            "peft": ["lora"], "lora_dim": [1, 16], "lora_dropout": [0.1],
            "lora_dropout_position": ["post"], "lora_target_modules": [["linear_fc2"]],
            "packed_document_length": [48.0, 1e9], "disable_parameter_transpose_cache": [True],
            "optimizer": ["lion", "sgd"], "sgd_momentum": [0.0],
            "attention_family": ["triton", "fa2"],
            "stack_settings": [{"fsdp.reshard_after_forward": False},
                               {"launch.elementwise_bytes_factor": {"rotary": 7.0}},
                               {"pipeline.lockstep": True},
                               {"efficiency.pipeline_engine": 1.5},
                               {"pipeline.schedules": ["1f1b"]},
                               {"context_parallel.algorithms": ["ulysses"]}]}
GPU = {"gemm_efficiency": [0.01, 1.0], "attention_efficiency": [0.01, 1.0],
       "memory_bandwidth_efficiency": [0.3, 1.0], "fp8_gemm_efficiency": [0.5],
       "fp4_gemm_efficiency": [0.3],
       "gemm_half_dim": [0.0, 1e-6, 1000.0], "kernel_overhead_us": [0.0, 100.0],
       "framework_memory_GB": [0.0, 10.0]}
# the step variability every simulated step carries (the expected step)
RELIABILITY = {"gpus_per_node": [1, 4, 8], "jitter_sigma": [0.0, 0.015, 1.0],
               "host_noise_s": [0.0, 0.01, 1e3], "sync_noise_s": [0.0, 1e-4, 1.0],
               "slow_node_fraction": [0.0, 0.01, 1.0], "slow_node_slowdown": [0.0, 0.2, 10.0]}
TIER = {"latency_us": [0.0, 50.0], "efficiency": [0.01, 1.0], "oversubscription": [1.0, 8.0],
        "nvls_busbw_GBps": [1.0, 480.0], "alltoall_efficiency": [0.01, 1.0],
        "half_bandwidth_MB": [0.0, 1e-9, 500.0], "curve_exponent": [0.05, 1.0, 3.0]}


def _divisors(n: int, of: list[int]) -> list[int]:
    return [d for d in of if n % d == 0] or [1]


@st.composite
def parallel_doc(draw, valid: bool, layers: int, heads: int, moe: dict | None) -> dict:
    """Parallel degrees; ``valid`` keeps to plans the cross-field rules accept."""
    degrees = [1, 2, 4, 8, 3, 16]
    if not valid:
        par = _fill(draw, {k: draw(st.sampled_from(degrees))
                           for k in ("tensor", "pipeline", "data")}, PARALLEL)
        schedule = draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))
        par["pipeline_schedule"] = schedule
        if schedule == "interleaved":
            par["virtual_pipeline"] = draw(st.sampled_from([2, 3]))
        return par
    tp = draw(st.sampled_from(_divisors(heads, [1, 2, 4])))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if p <= layers]))
    par = {"tensor": tp, "pipeline": pp, "data": draw(st.sampled_from([1, 2, 4])),
           "sequence_parallel": draw(st.booleans()),
           "context": draw(st.sampled_from([1, 1, 2])),
           "pipeline_schedule": draw(st.sampled_from(["1f1b", "gpipe", "interleaved"]))}
    if par["pipeline_schedule"] == "interleaved":
        if 2 * pp <= layers and pp > 1:
            par["virtual_pipeline"] = 2
        else:
            par["pipeline_schedule"] = "1f1b"
    if moe is not None:
        fold = tp * par["context"] * par["data"]
        par["expert"] = draw(st.sampled_from(_divisors(moe["num_experts"],
                                                       _divisors(fold, [1, 2, 4, 8]))))
        par["expert_tensor"] = draw(st.sampled_from(_divisors(fold // par["expert"], [1, tp])))
    return par


@st.composite
def workload_doc(draw, valid: bool) -> dict:
    """A small workload; ``valid`` ones respect the cross-field rules (before mutation)."""
    heads = draw(st.sampled_from([4, 1, 2, 8, 12]))
    layers = draw(st.sampled_from([4, 1, 2, 3, 5, 8]))
    model = _fill(draw, {
        "num_layers": layers, "hidden_size": heads * draw(st.sampled_from([16, 8, 64])),
        "num_attention_heads": heads, "vocab_size": draw(st.sampled_from([1000, 1, 4999])),
        "seq_length": draw(st.sampled_from([256, 64, 1024, 4096] if valid
                                           else [256, 1, 3, 64, 1024, 4096])),
    }, MODEL)
    if valid:
        model["num_query_groups"] = draw(st.sampled_from(_divisors(heads, [heads, 4, 2])))
        model.pop("ffn_hidden_size", None)
    if draw(st.booleans()):
        experts = draw(st.sampled_from([8, 1, 2, 16]))
        model["moe"] = _fill(draw, {"num_experts": experts}, MOE)
        if valid:
            model["moe"]["router_topk"] = min(experts, model["moe"].get("router_topk", 2))
            if model["moe"].get("router_load") == "trace":
                model["moe"]["router_load"] = "skewed"
            _keep_groups_valid(model["moe"])
    par = draw(parallel_doc(valid, layers, heads, model.get("moe")))
    if valid and "moe" in model and par.get("expert", 1) < 2:
        model["moe"].pop("token_dispatcher_type", None)  # DeepEP needs EP >= 2
    if valid and "moe" in model:
        model.pop("use_parallel_residual", None)  # costed for dense models only
    if valid and model["num_query_groups"] % par["tensor"]:
        model["num_query_groups"] = heads  # each TP rank holds whole KV heads
    training = _fill(draw, {}, TRAINING)
    if valid:
        training.pop("use_flash_attn", None)
        if training.get("loss_num_chunks") == 3:  # divides no power-of-two token count
            training["loss_num_chunks"] = 8
        if "moe" in model and training.get("peft") == "lora":  # attention adapters only
            training["lora_target_modules"] = ["linear_qkv"]
        if "packed_document_length" in training:  # whole documents, 2 x CP chunks each
            training["packed_document_length"] = max(
                2.0 * par.get("context", 1),
                min(training["packed_document_length"], model["seq_length"] / 2))
        if {"data_parallel_sharding_strategy", "keep_fp8_transpose_cache"} & set(training):
            training["use_megatron_fsdp"] = True  # read only under Megatron-FSDP
        if training.get("attention_family") == "triton":  # an A100 figure; the fuzz GPU is "G"
            training["attention_family"] = "fa2"
    if valid:
        _keep_instances_valid(training, par)
    per_step = training.get("micro_batch_size", 1) * par["data"]
    many = per_step * par["pipeline"] * draw(st.sampled_from([1, 2, 3]))
    training["global_batch_size"] = many if valid else draw(st.sampled_from([many, 1, 7]))
    return {"model": model, "parallelism": par, "training": training}


def _keep_groups_valid(moe: dict) -> None:
    """Group-limited routing as the schema accepts it: both fields, groups dividing the
    experts, at most as many selected groups, enough experts in them, no node limit."""
    n, g = moe.get("router_num_groups"), moe.get("router_group_topk")
    experts, topk = moe["num_experts"], moe.get("router_topk", 2)
    if n is None or g is None or experts % n or g > n or topk > g * (experts // n) \
            or moe.get("max_nodes_per_token") is not None:
        moe.pop("router_num_groups", None)
        moe.pop("router_group_topk", None)


def _keep_instances_valid(training: dict, par: dict) -> None:
    """Optimizer instances that divide DP x CP and expert-DP, on a sharded optimizer, and
    HFSDP only on Megatron-FSDP's ZeRO-3 with several instances (the cross-field rules)."""
    k = training.get("num_distributed_optimizer_instances", 1)
    dp_cp = par["data"] * par.get("context", 1)
    edp = dp_cp * par["tensor"] // (par.get("expert", 1) * par.get("expert_tensor", 1))
    fsdp = training.get("use_megatron_fsdp", False)
    sharded = (fsdp and training.get("data_parallel_sharding_strategy") != "no_shard") \
        or (not fsdp and training.get("distributed_optimizer", True))
    if dp_cp % k or max(1, edp) % k or not sharded:
        training.pop("num_distributed_optimizer_instances", None)
        k = 1
    if k < 2 or not fsdp or training.get("data_parallel_sharding_strategy",
                                         "optim_grads_params") != "optim_grads_params":
        training.pop("outer_dp_sharding_strategy", None)


@st.composite
def topology_doc(draw, gpus_needed: int, domain: int, valid: bool) -> dict:
    gpu = _fill(draw, {"name": "G",
                       "peak_tflops": _fill(draw, {"bf16": draw(st.sampled_from([989.0, 1.0]))},
                                            {} if valid else {"fp8": [1979.0],
                                                              "fp4": [3958.0]}),
                       "hbm_GB": draw(st.sampled_from([80.0, 1.0, 300.0])),
                       "hbm_bandwidth_TBps": draw(st.sampled_from([3.35, 0.1]))}, GPU)
    size = max(draw(st.sampled_from([8, 1, 2, 4, 72])), domain)
    tiers = []
    for i in range(draw(st.sampled_from([3, 1, 2]))):
        if i:
            size *= draw(st.sampled_from([32, 2, 1000]))
        tiers.append(_fill(draw, {"name": f"t{i}", "size": size,
                                  "bandwidth_GBps": draw(st.sampled_from([50.0, 0.1, 2000.0]))},
                           TIER))
    if valid or draw(st.booleans()):  # make the cluster big enough for the plan
        tiers[-1]["size"] = size * max(1, -(-gpus_needed // size))
    if valid:
        gpu["peak_tflops"]["fp8"] = 1979.0
        gpu["peak_tflops"]["fp4"] = 3958.0
    doc = {"name": "fuzz", "gpu": gpu, "tiers": tiers}
    if draw(st.booleans()):
        doc["reliability"] = _fill(draw, {}, RELIABILITY)
    return doc


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _mutate(draw, doc: dict, only_numbers: bool) -> None:
    """Apply one mutation in place: push a number to an extreme, set an evil value of any
    type, delete a key, or add an unknown one."""
    actions = ["extreme", "extreme", "set", "delete", "unknown"]
    action = "extreme" if only_numbers else draw(st.sampled_from(actions))
    paths = _paths(doc)
    if action == "extreme":
        paths = [p for p in paths if _is_number(_get(doc, p))] or paths
    path = draw(st.sampled_from(paths))
    parent = _get(doc, path[:-1])
    if action == "extreme":
        parent[path[-1]] = draw(EXTREME)
    elif action == "set":  # a copy: EVIL's lists and dicts are shared between draws, and a
        parent[path[-1]] = copy.deepcopy(draw(EVIL))  # later mutation inside one would loop
    elif action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.sampled_from(["tensr", "nmu_layers", "bandwdith_GBps", "x"]))] = 1


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def documents(draw) -> tuple[dict, dict]:
    valid = draw(st.booleans())
    w = draw(workload_doc(valid))
    p = w["parallelism"]
    t = draw(topology_doc(p["tensor"] * p["pipeline"] * p["data"] * p.get("context", 1),
                          p["tensor"], valid))
    # Valid documents get at most one extreme number (so many still simulate, with it);
    # the others any mix of mutations.
    for _ in range(draw(st.sampled_from([0, 1] if valid else [0, 1, 1, 2, 3]))):
        _mutate(draw, draw(st.sampled_from([w, t])), only_numbers=valid)
    return w, t


def _finite_numbers(node: Any, path: str = "") -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _finite_numbers(v, f"{path}.{k}")
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            _finite_numbers(v, f"{path}.{i}")
    elif isinstance(node, float):
        assert math.isfinite(node), f"{path} = {node}"


def check_invariants(r) -> None:
    _finite_numbers(r.to_dict())
    assert r.step_time_s > 0
    # the expected step waits for slow peers: never faster than the ideal replay
    assert 0 < r.step_time_ideal_s <= r.step_time_s * (1 + 1e-12)
    assert 0.0 <= r.bubble_fraction < 1.0
    for axis, t in r.exposed_comm_s.items():
        assert 0.0 <= t <= r.step_time_s * (1 + 1e-9), (axis, t, r.step_time_s)
    assert sum(r.breakdown_s.values()) <= r.step_time_s * (1 + 1e-6) + 1e-12
    # the FSDP parts are non-negative and are part of the exposed DP time
    assert all(v >= 0.0 for v in r.fsdp_breakdown_s.values()), r.fsdp_breakdown_s
    assert sum(r.fsdp_breakdown_s.values()) <= r.exposed_comm_s["dp"] * (1 + 1e-9) + 1e-12
    assert r.memory_per_gpu_GB > 0
    assert r.tokens_per_s > 0
    assert 0.0 < r.hfu <= 1.0 + 1e-9, r.hfu
    assert r.model_tflops_per_gpu_causal <= r.model_tflops_per_gpu * (1 + 1e-12)


def simulate_or_config_error(w: dict, t: dict) -> str:
    """"result" or "error"; fails on any other exception or a broken invariant."""
    try:
        r = simulate(w, t)
    except ConfigError as exc:
        text = exc.message()
        assert text and "\n" not in text, text
        assert exc.field
        return "error"
    check_invariants(r)
    return "result"


def test_any_document_simulates_sanely_or_raises_config_error():
    outcomes = {"result": 0, "error": 0}

    @settings(max_examples=examples(2000), **FUZZ)
    @given(documents())
    def check(docs):
        outcomes[simulate_or_config_error(*docs)] += 1

    check()
    # Both sides of the property must be exercised, or the fuzzer has degenerated.
    assert outcomes["result"] >= 400 and outcomes["error"] >= 400, outcomes


@st.composite
def valid_workload(draw) -> dict:
    """A small valid workload with no mutation, for the shipped topologies."""
    return draw(workload_doc(True))


@pytest.mark.parametrize("topology", sorted(p.stem for p in
                                            (Path(__file__).parents[1] / "topologies")
                                            .glob("*.yaml")))
def test_hfu_at_most_one_on_every_shipped_topology(topology):
    seen = {"result": 0}

    @settings(max_examples=examples(40), **FUZZ)
    @given(valid_workload())
    def check(w):
        try:
            r = simulate(w, topology)
        except ConfigError:
            return
        check_invariants(r)
        seen["result"] += 1

    check()
    assert seen["result"] >= 10, seen


def _config_error_or_result(call) -> str:
    try:
        call()
    except ConfigError as exc:
        text = exc.message()
        assert text and "\n" not in text and exc.field, text
        return "error"
    return "result"


def test_yaml_text_loads_or_raises_config_error(tmp_path):
    path = tmp_path / "w.yaml"
    outcomes = {"result": 0, "error": 0}

    @settings(max_examples=examples(150), **FUZZ)
    @given(yaml_text())
    def check(data):
        path.write_bytes(data)
        outcomes[_config_error_or_result(lambda: load_workload(path))] += 1

    check()
    assert outcomes["error"] >= 50, outcomes


def test_override_strings_load_or_raise_config_error():
    outcomes = {"result": 0, "error": 0}

    @settings(max_examples=examples(150), **FUZZ)
    @given(override_text())
    def check(item):
        outcomes[_config_error_or_result(
            lambda: load_workload("tiny", dict([parse_override(item)])))] += 1

    check()
    assert min(outcomes.values()) >= 10, outcomes


def test_odd_paths_raise_config_error():
    @settings(max_examples=examples(100), **FUZZ)
    @given(path_text())
    def check(path):
        assert _config_error_or_result(lambda: load_workload(path)) == "error"

    check()


def test_deeply_nested_dicts_raise_config_error():
    @settings(max_examples=examples(30), **FUZZ)
    @given(deep_dict())
    def check(doc):
        assert _config_error_or_result(lambda: simulate(doc, "dgx-h100")) == "error"

    check()


def test_cli_options_exit_0_or_2_with_one_line(capsys):
    @settings(max_examples=examples(25), **FUZZ)
    @given(cli_argv())
    def check(argv):
        capsys.readouterr()
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse's own refusals (not a number at all)
            code = exc.code
        err = capsys.readouterr().err
        assert code in (0, 2), (argv, code, err)
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("clustersim: error:"), err

    check()
