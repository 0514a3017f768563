"""One way to pass overrides in the API, search rows that reproduce, help text everywhere,
``-o`` meaning the same in every subcommand."""

from __future__ import annotations

import argparse
import json

import pytest

from simulator import ConfigError, simulate
from simulator.cli.main import build_parser
from simulator.cli.main import main as cli
from simulator.sweep import row_to_overrides, search, sweep


def test_overrides_mapping_equals_legacy_keywords_and_seed_sets_training_seed():
    over = {"parallelism.tensor": 2, "parallelism.data": 2}
    new = simulate("tiny", "dgx-h100", overrides=over)
    old = simulate("tiny", "dgx-h100", **over)
    assert new == old
    assert simulate("tiny", "dgx-h100", parallelism__tensor=2, parallelism__data=2) == new
    moe = {"model.moe": {"num_experts": 4, "router_topk": 2, "router_load": "skewed"},
           "parallelism.expert": 2, "parallelism.expert_tensor": 1}
    a = simulate("tiny", "dgx-h100", overrides={**moe, "training.seed": 7})
    b = simulate("tiny", "dgx-h100", overrides=moe, seed=7)
    assert a == b
    with pytest.raises(ConfigError, match="overrides"):
        simulate("tiny", "dgx-h100", overrides=[("parallelism.tensor", 2)])


def test_sweep_takes_the_same_keywords():
    df = sweep("tiny", "dgx-h100", axes={"parallelism.tensor": [2]}, executor="serial",
               overrides={"parallelism.data": 2}, seed=3)
    assert df.loc[0, "training.seed"] == 3 and df.loc[0, "status"] == "ok"


def test_search_several_gpu_counts_and_rows_reproduce():
    over = {"training.global_batch_size": 16}
    results = search("tiny", "dgx-h100", [4, 8], top=2, executor="serial",
                     micro_batch_sizes=(1, 2), overrides=over)
    assert [r.gpus for r in results] == [4, 8]
    for res in results:
        for rank in (1, 2):
            row = res.plans[res.plans["rank"] == rank].iloc[0]
            again = simulate("tiny", "dgx-h100", overrides=res.overrides_for(rank))
            assert again.tokens_per_s == row["tokens_per_s"]
            assert again.num_gpus == res.gpus
            assert row_to_overrides(row.to_dict())["training.recompute"] == row["recompute"]
    with pytest.raises(ConfigError, match="rank"):
        results[0].overrides_for(99)


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", helps.get(name)
                yield from _walk(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_subcommand_and_option_has_help_text():
    missing = [where for where, text in _walk(build_parser(), "clustersim") if not text]
    assert not missing, missing


def _output_actions(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _output_actions(sub, f"{path} {name}")
        elif "-o" in action.option_strings:
            yield path, action


def test_dash_o_is_output_everywhere_and_writes_what_stdout_would_show(tmp_path, capsys):
    found = dict(_output_actions(build_parser(), "clustersim"))
    assert {"clustersim run", "clustersim memory", "clustersim search", "clustersim sweep",
            "clustersim trace", "clustersim validate", "clustersim collective",
            "clustersim moe-balance"} <= set(found)
    for path, action in found.items():
        assert action.option_strings[:2] == ["-o", "--output"], path
    assert cli(["run", "tiny", "-t", "dgx-h100", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    out = tmp_path / "r.json"
    assert cli(["run", "tiny", "-t", "dgx-h100", "-o", str(out)]) == 0  # format from .json
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text()) == shown
    mem = tmp_path / "m.txt"
    assert cli(["memory", "tiny", "-t", "dgx-h100", "-o", str(mem)]) == 0
    assert "FITS" in mem.read_text()


def test_topology_help_names_every_shipped_topology():
    from simulator.cli.common import TOPOLOGY_HELP
    from simulator.config.loader import shipped_names

    names = shipped_names("topologies")
    assert "gb300-nvl72" in names
    assert all(name in TOPOLOGY_HELP for name in names), (names, TOPOLOGY_HELP)
