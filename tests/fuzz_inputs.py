"""Hypothesis generators of bad input that is not a document: text, strings, paths, argv.

Each reproduces a class the external fuzz run of issue 17 found escaping as a
traceback: control characters anywhere in YAML (comments too), impossible
dates and bad tagged values (in a file or a ``--set``), over-long and very
deep paths, dicts nested past any configuration, out-of-range numeric CLI
options, non-UTF-8 files. Used by ``tests/test_fuzz_simulate.py``.
"""

from __future__ import annotations

from hypothesis import strategies as st

TINY = ("model: {name: t, num_layers: 2, hidden_size: 64, num_attention_heads: 4, "
        "vocab_size: 1000, seq_length: 64}\n"
        "parallelism: {tensor: 1, pipeline: 1, data: 1}\n"
        "training: {global_batch_size: 2, micro_batch_size: 1}\n")
CONTROL = [chr(c) for c in (*range(0, 9), 11, 12, *range(14, 32), 127, 0x85, 0xFFFE)]
SCALARS = ["2024-02-30", "2024-13-01", "2023-02-29 10:00:00", "!!int 1e3", "!!int x",
           "!!float abc", "!!bool maybe", "!!timestamp yesterday", "!!binary ???", "!!null 1",
           "!!python/object:os.system x", "!!str 3", "0x1F", "1_000", ".inf", "-.nan",
           "[1, 2", "{a: 1", "&a [*a]", "~", "'", "\"\\x\"", "2", "4", "yes"]
FIELDS = ["model.name", "model.num_layers", "model.seq_length", "parallelism.tensor",
          "training.seed", "training.global_batch_size", "model.moe", "x.y", "model"]


@st.composite
def yaml_text(draw) -> bytes:
    """A small workload's YAML with control characters, bad scalars or a foreign encoding."""
    text = TINY + "# a comment\n"
    kind = draw(st.sampled_from(["control", "scalar", "encoding", "random"]))
    if kind == "control":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(CONTROL)) + text[at:]
    elif kind == "scalar":
        text += f"extra: {{v: {draw(st.sampled_from(SCALARS))}}}\n"
        field = draw(st.sampled_from(["name", "seq_length", "num_layers"]))
        text = text.replace(f"{field}: ", f"{field}: {draw(st.sampled_from(SCALARS))} #", 1)
    elif kind == "encoding":
        return text.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1"]))) + b"\xff"
    else:
        text = draw(st.text(min_size=0, max_size=200))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def override_text(draw) -> str:
    """``FIELD=VALUE`` as a user types it after ``--set``."""
    value = draw(st.one_of(st.sampled_from(SCALARS), st.text(max_size=20)))
    return f"{draw(st.sampled_from(FIELDS))}={value}"


@st.composite
def path_text(draw) -> str:
    """A workload path the OS refuses or that does not exist: too long, too deep, NUL."""
    kind = draw(st.sampled_from(["long", "deep", "nul", "dir"]))
    if kind == "long":
        return "a" * draw(st.integers(256, 20_000)) + ".yaml"
    if kind == "deep":
        return "d/" * draw(st.integers(1000, 6000)) + "w.yaml"
    if kind == "nul":
        return "w\x00.yaml"
    return draw(st.sampled_from(["/", ".", "/proc/self", "/dev/null", "/proc/self/environ"]))


@st.composite
def deep_dict(draw) -> dict:
    """A workload dict with a branch nested hundreds to thousands of levels deep."""
    depth = draw(st.integers(100, 5000))
    inner: dict = {}
    node = inner
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    where = draw(st.sampled_from(["model", "training", "top"]))
    if where == "top":
        return {"x": inner}
    return {"model": {"name": "t", "moe": inner} if where == "model" else {},
            "training": inner if where == "training" else {}}


NUMBERS = ["-1", "0", "1", "2", "nan", "inf", "-inf", "1e400", "-0.5", "1e-300", "x",
           "99999999999999999999"]


@st.composite
def cli_argv(draw) -> list[str]:
    """A cheap subcommand with numeric options drawn from edge values."""
    n = st.sampled_from(NUMBERS)
    kind = draw(st.sampled_from(["moe", "memory", "search", "collective", "output"]))
    if kind == "output":  # only paths the OS refuses, so nothing is ever written
        bad = draw(st.sampled_from(["a" * 5000 + ".json", "d/" * 3000 + "x.json", "x\x00.json",
                                    "/proc/self/r.json", "/"]))
        return ["run", "tiny", "-t", "dgx-h100", "-o", bad]
    if kind == "moe":
        return ["moe-balance", "mixtral-8x7b", "--steps", draw(st.sampled_from(["1", "2", "-1",
                                                                                 "0"])),
                "--tokens", "64", "--gamma", draw(n), "--seed", draw(n), "--format", "json"]
    if kind == "memory":
        return ["memory", "tiny", "-t", "dgx-h100", "--expert-load-factor", draw(n)]
    if kind == "search":
        return ["search", "tiny", "-t", "dgx-h100", "--gpus", draw(st.sampled_from(["4", "-4"])),
                "--executor", "serial", "--max-simulations", draw(n), "--max-context", draw(n),
                "--top", "1", "--micro-batch-sizes", "1"]
    return ["collective", "-t", "dgx-h100", "--ranks", draw(n), "--stride", draw(n),
            "-b", "1M", "-e", "1M"]
