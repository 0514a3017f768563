"""A table of fuzzed surfaces: each an input generator, a call and a check of its output.

A surface is anything a user feeds input to: Hugging Face import, time-to-train,
sensitivity and their command lines (issue 33); capacity and calibration are added the
same way, one :class:`Surface` in :data:`SURFACES`. For each drawn input the harness
(``tests/test_fuzz_surfaces.py``) calls the surface and accepts two outcomes only:

* a :class:`simulator.ConfigError` on one line, naming a non-empty field;
* a result for which ``check(input, result)`` finds nothing impossible (a NaN, a
  negative time, fractions that do not sum to one, ...).

Anything else is a failure: a traceback, or (in the long run) more than
:data:`CPU_LIMIT_S` of CPU time for one input.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CPU_LIMIT_S = 10.0  # one input's CPU budget in the long run (CLUSTERSIM_FUZZ_EXAMPLES)


@dataclass(frozen=True)
class Surface:
    """One fuzzed surface: ``inputs`` draws an input, ``call`` runs it, ``check`` lists
    what is impossible in a result; ``examples`` is the size of the CI slice."""

    inputs: st.SearchStrategy
    call: Callable[[Any], Any]
    check: Callable[[Any, Any], list[str]]
    examples: int


def _finite_numbers(obj: Any, path: str = "") -> list[str]:
    """Every float in ``obj`` (nested dicts/lists) that is NaN or infinite."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [f"{path or 'value'} = {obj}"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _finite_numbers(v, f"{path}.{k}")]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in _finite_numbers(v, f"{path}.{i}")]
    return []


EVIL = [0, -1, 4.9, 4.0, True, False, None, "32", "", [], {}, [1], {"a": 1}, 1e300, -1e300,
        2**70, float("nan"), float("inf"), float("-inf"), "HUGE"]

# --- Hugging Face import ------------------------------------------------------------------

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
         "hidden_act": "silu", "tie_word_embeddings": False, "rope_scaling": None}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
             "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
             "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960,
             "hidden_act": "silu", "tie_word_embeddings": False}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
               "n_group": 8, "topk_group": 4, "q_lora_rank": 1536, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
               "vocab_size": 129280, "max_position_embeddings": 163840,
               "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
               "hidden_act": "silu", "attention_dropout": 0.0}
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880,
           "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
           "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088,
           "max_position_embeddings": 131072, "hidden_act": "silu",
           "tie_word_embeddings": False}
HF_BASES = [LLAMA, QWEN3_MOE, DEEPSEEK_V3, GPT_OSS]
HF_EXTRA_KEYS = ["architectures", "head_dim", "rope_scaling", "attention_dropout",
                 "shared_expert_intermediate_size", "q_lora_rank", "mlp_only_layers"]
HF_ARCHS = [["LlamaForCausalLM"], [["LlamaForCausalLM"]], [{"a": 1}], [], "LlamaForCausalLM",
            ["BertModel"], [None], [3]]
_TMP = Path(tempfile.mkdtemp(prefix="clustersim-fuzz-"))


@st.composite
def hf_text(draw) -> str:
    """A config.json: a published one with keys set to wrong types, NaN, huge integers,
    or deleted; sometimes not a JSON object at all."""
    kind = draw(st.sampled_from(["mutate"] * 8 + ["garbage", "not_object"]))
    if kind == "garbage":
        return draw(st.text(max_size=60))
    if kind == "not_object":
        return json.dumps(draw(st.sampled_from([[1], 3, "x", None, [LLAMA]])))
    config = dict(draw(st.sampled_from(HF_BASES)))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(config) + HF_EXTRA_KEYS))
        action = draw(st.sampled_from(["set", "set", "delete", "arch"]))
        if action == "delete":
            config.pop(key, None)
        elif action == "arch":
            config["architectures"] = draw(st.sampled_from(HF_ARCHS))
        else:
            config[key] = draw(st.one_of(st.sampled_from(EVIL), st.integers(-10**6, 10**6)))
    text = json.dumps(config)  # NaN / Infinity written as JSON's non-standard tokens
    return text.replace('"HUGE"', "9" * draw(st.sampled_from([4301, 5000, 20000])))


def hf_call(text: str) -> dict:
    from simulator.config import load_workload
    from simulator.config.hf import load_hf_model

    path = _TMP / "config.json"
    path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_hf_model(path, "fuzz")
    load_workload({"model": model, "parallelism": {"tensor": 1, "pipeline": 1, "data": 1},
                   "training": {"global_batch_size": 1, "micro_batch_size": 1}})
    return model


ZERO_OK = {"shared_expert_ffn_hidden_size", "first_k_dense", "attention_dropout",
           "hidden_dropout"}


def hf_check(text: str, model: dict) -> list[str]:
    bad = _finite_numbers(model)
    for section in (model, model.get("moe") or {}):
        for key, value in section.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if value < 0 or (value == 0 and key not in ZERO_OK):
                bad.append(f"{key} = {value}")
            if key not in ("attention_dropout", "hidden_dropout") and not isinstance(value,
                                                                                      int):
                bad.append(f"{key} = {value!r} is not an integer")
    if model.get("seq_length") not in (None, 4096) and model["seq_length"] > 4096:
        bad.append(f"seq_length {model['seq_length']} taken from the config's context")
    return bad


# --- time-to-train ------------------------------------------------------------------------

RELIABILITY = ["gpu_failures_per_gpu_day", "node_failures_per_node_day",
               "link_failures_per_gpu_day", "software_failures_per_gpu_day", "restart_s",
               "jitter_sigma", "host_noise_s", "sync_noise_s", "slow_node_fraction",
               "slow_node_slowdown"]
STORAGE = ["node_write_GBps", "aggregate_write_GBps", "snapshot_GBps_per_gpu",
           "node_read_GBps"]
EXTREME = [0.0, 1e-300, 1e-9, 0.5, 1.0, 3.0, 100.0, 1e6, 1e300, -1.0, float("nan"),
           float("inf")]


@st.composite
def ttt_input(draw) -> dict:
    topo: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        section, keys = draw(st.sampled_from([("reliability", RELIABILITY),
                                              ("storage", STORAGE)]))
        topo[f"{section}.{draw(st.sampled_from(keys))}"] = draw(
            _mostly(st.sampled_from([0.0, 1e-3, 0.1, 1.0, 3.0, 100.0]),
                    [1e-300, 1e6, 1e300], [-1.0, float("nan"), float("inf")]))
    workload = draw(st.sampled_from(["tiny", "tiny", "llama3-8b"]))
    over = {}
    if workload == "tiny":
        over = draw(st.sampled_from([{}, {"parallelism.data": 1024,
                                          "training.global_batch_size": 2048},
                                     {"parallelism.data": 4096,
                                      "training.global_batch_size": 8192}]))
    return {"workload": workload, "topology": draw(st.sampled_from(["dgx-h100",
                                                                    "gb200-nvl72"])),
            "tokens": draw(_mostly(st.floats(1.0, 1e25), [1.0, 1e9, 1e15, 1e22, 1e30, 1e300],
                                   [0.0, -1.0, float("nan"), float("inf")])),
            "overrides": over, "topology_overrides": topo,
            "seed": draw(st.sampled_from([None, 0, 1, 2**40])),
            "price_per_gpu_hour": draw(_mostly(st.just(None), [0.0, 2.5, 1e300],
                                               [-1.0, float("nan")])),
            "save_interval": draw(_mostly(st.just(None), [1, 10, 10**9], [0, -3])),
            "async_save": draw(st.booleans()),
            "mc_runs": draw(_mostly(st.sampled_from([1, 2, 20, 200]), [], [0, -1, 100_001])),
            "mc_steps": draw(_mostly(st.sampled_from([1, 2, 8]), [], [0]))}


def _mostly(common: st.SearchStrategy, rare: list, bad: list) -> st.SearchStrategy:
    """``common`` about 8 times in 10, one of ``rare`` or of ``bad`` otherwise: most inputs
    should reach a result so that results are checked too, not only errors."""
    return st.integers(0, 9).flatmap(
        lambda i: common if i < 8 or not (rare or bad) else
        st.sampled_from(rare or bad) if i == 8 else st.sampled_from(bad or rare))


def ttt_call(kw: dict):
    from simulator import time_to_train

    return time_to_train(**kw)


def ttt_check(kw: dict, r: Any) -> list[str]:
    d = r.to_dict()
    if r.interruptions == 0:  # no failures: no MTBF and no checkpoint interval (infinite)
        d = {**d, "mtbf_hours": 0.0, "checkpoint": {**d["checkpoint"], "interval_s": 0.0,
                                                    "interval_steps": 0.0}}
    bad = _finite_numbers(d)
    try:
        json.loads(r.to_json(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as exc:
        bad.append(f"to_json is not strict JSON: {exc}")
    if not r.days > 0:
        bad.append(f"days {r.days}")
    if not 0 < r.goodput <= 1 + 1e-12:
        bad.append(f"goodput {r.goodput}")
    parts = r.breakdown_fraction
    if any(not -1e-12 <= v <= 1 + 1e-9 for v in parts.values()) or \
            not math.isclose(sum(parts.values()), 1.0, rel_tol=1e-6):
        bad.append(f"breakdown {parts}")
    mc = r.monte_carlo
    if not 0 < mc["days_p10"] <= mc["days_p90"] * (1 + 1e-12):
        bad.append(f"Monte-Carlo p10 {mc['days_p10']} p90 {mc['days_p90']}")
    if r.interruptions < 0 or mc["interruptions_mean"] < 0:
        bad.append("negative interruptions")
    if (r.cost_usd is None) != (kw["price_per_gpu_hour"] is None):
        bad.append("cost without a price, or a price without cost")
    if not math.isclose(r.gpu_hours, r.num_gpus * r.days * 24, rel_tol=1e-9):
        bad.append("GPU-hours are not GPUs x days x 24")
    return bad


# --- sensitivity --------------------------------------------------------------------------

GPU_KEYS = ["gpu.gemm_efficiency", "gpu.hbm_bandwidth_TBps", "gpu.kernel_overhead_us",
            "gpu.framework_memory_GB", "tiers.0.bandwidth_GBps", "tiers.1.latency_us",
            "reliability.jitter_sigma"]


@st.composite
def sens_input(draw) -> dict:
    topo = {draw(st.sampled_from(GPU_KEYS)): draw(st.sampled_from(EXTREME + EVIL))
            for _ in range(draw(st.integers(0, 2)))}
    return {"workload": "tiny", "topology": draw(st.sampled_from(["dgx-h100", "dgx-a100"])),
            "topology_overrides": topo,
            "step": draw(_mostly(st.sampled_from([0.1, 0.5, 0.01]), [1e-9, 0.999],
                                 [0.0, 1.0, -0.1, float("nan"), "x"])),
            "only": draw(_mostly(st.sampled_from([["gpu.peak"], ["tiers.0"], ["reliability."],
                                                  ["gpu.gemm", "tiers.1"]]), [None],
                                 [["nosuch"]]))}


def sens_call(kw: dict):
    from simulator.sensitivity import sensitivity

    return sensitivity(**kw)


def sens_check(kw: dict, rows: list) -> list[str]:
    bad = []
    for r in rows:
        bad += _finite_numbers([r.value, r.low, r.high, r.step_time_low_s,
                                r.step_time_high_s, r.step_time, r.memory], r.name)
        if not r.low < r.high or r.step_time_low_s <= 0 or r.step_time_high_s <= 0:
            bad.append(f"{r.name}: low {r.low} high {r.high} steps {r.step_time_low_s} "
                       f"{r.step_time_high_s}")
        if kw["only"] and not any(r.name.startswith(p) for p in kw["only"]):
            bad.append(f"{r.name} outside --only {kw['only']}")
    keys = [(-abs(r.step_time), -abs(r.memory), r.name) for r in rows]
    if keys != sorted(keys):
        bad.append("rows not sorted by |elasticity|")
    return bad


# --- the command line ---------------------------------------------------------------------

CLI_VALUES = ["0", "-1", "1", "2", "1e22", "nan", "inf", "1e400", "", "x", "8,,16", "4.9",
              "99999999999999999999"]


@st.composite
def cli_argv(draw) -> list[str]:
    """``clustersim time-to-train / sensitivity / workload --from-hf / search`` with odd
    option values and ``-o`` extensions."""
    head = draw(st.sampled_from([
        ["time-to-train", "tiny", "-t", "dgx-h100", "--tokens", "1e12", "--runs", "2",
         "--steps", "2"],
        ["sensitivity", "tiny", "-t", "dgx-h100", "--only", "gpu.peak"],
        ["workload", "--from-hf", "tests/data/hf/llama3-8b/config.json", "--plan", "tiny"],
        ["search", "tiny", "-t", "dgx-h100", "--executor", "serial", "--micro-batch-sizes",
         "1", "--max-context", "1", "--gpus", "4"],
        ["run", "tiny", "-t", "dgx-h100"]]))
    options = {"time-to-train": ["--tokens", "--runs", "--steps", "--save-interval",
                                 "--price-per-gpu-hour", "--seed", "--gpus"],
               "sensitivity": ["--step", "--only", "--gpus"],
               "workload": ["--set"], "search": ["--gpus", "--memory-headroom", "--top"],
               "run": ["--gpus", "--steps"]}[head[0]]
    argv = list(head)
    for _ in range(draw(st.integers(0, 2))):
        option = draw(st.sampled_from(options))
        value = draw(st.sampled_from(CLI_VALUES))
        argv += [option, f"model.seq_length={value}" if option == "--set" else value]
    if draw(st.booleans()):
        ext = draw(st.sampled_from(["json", "txt", "csv", "png", "yaml", "parquet", "x"]))
        argv += ["-o", str(_TMP / f"out.{ext}")]
    return argv


def cli_call(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``clustersim ARGV`` in process; exit 2 becomes a
    ConfigError-like outcome for the harness only when its message is one line."""
    import contextlib
    import io

    from simulator import ConfigError
    from simulator.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's own errors
            rc = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    errors = [line for line in text.splitlines() if line.startswith("clustersim: error")]
    if rc == 2 and len(errors) == 1:
        raise ConfigError("argv", " ".join(argv)[-60:], errors[0])
    return rc, text


def cli_check(argv: list[str], outcome: tuple[int, str]) -> list[str]:
    rc, err = outcome
    return [] if rc == 0 else [f"exit {rc}: {err.strip()[-300:]}"]


# --- capacity ------------------------------------------------------------------------------

CAP_TOPOLOGIES = ["dgx-h100", "dgx-a100", "gb200-nvl72"]


@st.composite
def cap_input(draw) -> dict:
    tops = draw(_mostly(st.lists(st.sampled_from(CAP_TOPOLOGIES), min_size=1, max_size=2,
                                 unique=True), [["dgx-h100"] * 2], [[], ["nosuch"], "dgx-h100"]))
    return {"workload": "tiny", "topologies": tops,
            "tokens": draw(_mostly(st.sampled_from([1e9, 1e11]), [1.0, 1e22],
                                   [0.0, -1.0, float("nan"), float("inf"), "x"])),
            "gpus": draw(_mostly(st.lists(st.sampled_from([8, 16]), min_size=1, max_size=2,
                                          unique=True), [[3], [8, 8]], [[], [0], [-8], ["x"]])),
            "prices": draw(_mostly(st.just(None), [{t: 2.0 for t in CAP_TOPOLOGIES}],
                                   [{"dgx-h100": -1.0}, {"dgx-h100": float("nan")}])),
            "deadline_days": draw(_mostly(st.just(None), [1e-6, 1e6], [0.0, -1.0, "x"])),
            "budget_usd": draw(_mostly(st.just(None), [1.0, 1e12], [0.0, float("nan")]))}


def cap_call(kw: dict):
    from simulator.capacity import capacity

    return capacity(kw["workload"], kw["tokens"], kw["topologies"], kw["gpus"],
                    prices=kw["prices"], deadline_days=kw["deadline_days"],
                    budget_usd=kw["budget_usd"])


def cap_check(kw: dict, df: Any) -> list[str]:
    bad = []
    fit = df[df["status"] == "ok"]  # other rows say why no plan fits
    for _, r in fit.iterrows():
        if not r["days"] > 0 or not r["gpu_hours"] > 0:
            bad.append(f"{r['topology']} {r['num_gpus']}: days {r['days']} GPU-h {r['gpu_hours']}")
        if kw["prices"] and r.get("cost_usd") is not None and \
                r["cost_usd"] != r["gpu_hours"] * kw["prices"][r["topology"]]:
            bad.append(f"{r['topology']} {r['num_gpus']}: cost is not GPU-hours x price")
    tops = [kw["topologies"]] if isinstance(kw["topologies"], str) else kw["topologies"]
    if len(df) != len(set(tops)) * len(set(kw["gpus"])):
        bad.append(f"{len(df)} rows for {kw['topologies']} x {kw['gpus']}")
    return bad


# --- calibrate ------------------------------------------------------------------------------

NCCL_LOG = Path(__file__).parent / "data" / "calibrate" / "mi300x_all_reduce_perf_8gpu.txt"


@st.composite
def cal_input(draw) -> str:
    lines = NCCL_LOG.read_text().splitlines()
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "garble", "number", "truncate", "dup"]))
        if how == "drop":
            del lines[i]
        elif how == "garble":
            lines[i] = draw(st.text(max_size=40))
        elif how == "number":
            words = lines[i].split()
            if words:
                words[draw(st.integers(0, len(words) - 1))] = draw(st.sampled_from(
                    ["nan", "-1", "0", "1e400", "inf", "x", "99999999999999999999"]))
                lines[i] = " ".join(words)
        elif how == "truncate":
            lines = lines[:i]
        else:
            lines.insert(i, lines[i])
        if not lines:
            break
    return "\n".join(lines) + "\n"


def cal_call(text: str):
    from simulator.calibrate import calibrate

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "all_reduce_perf.txt"
        path.write_text(text)
        return calibrate("mi300x", [path], loo=False, compare=False)


def cal_check(text: str, cal: Any) -> list[str]:
    bad = []
    for st_ in cal.stages:
        for name, v in st_.values.items():
            if not (isinstance(v, float | int) and math.isfinite(v) and v > 0):
                bad.append(f"{name} = {v}")
    return bad


SURFACES: dict[str, Surface] = {
    "hf_import": Surface(hf_text(), hf_call, hf_check, examples=60),
    "time_to_train": Surface(ttt_input(), ttt_call, ttt_check, examples=25),
    "sensitivity": Surface(sens_input(), sens_call, sens_check, examples=6),
    "cli": Surface(cli_argv(), cli_call, cli_check, examples=10),
    "capacity": Surface(cap_input(), cap_call, cap_check, examples=3),
    "calibrate": Surface(cal_input(), cal_call, cal_check, examples=3),
}
