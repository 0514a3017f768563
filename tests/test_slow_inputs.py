"""Inputs that used to take seconds: a huge YAML list, all-expert routing (issue 33.5)."""

from __future__ import annotations

import pytest

from simulator import ConfigError
from simulator.config import loader
from simulator.config.loader import parse_yaml

TINY = (loader.REPO_ROOT / "workloads" / "tiny.yaml").read_text()


@pytest.mark.parametrize("form", ["flow", "tagged", "block"])
def test_a_huge_list_is_refused_as_written_not_blamed_on_aliases(form, monkeypatch):
    monkeypatch.setattr(loader, "MAX_VALUES", 3000)  # the same paths, 100x smaller
    n = 9000
    body = {"flow": "extra: [" + ", ".join(["1"] * n) + "]\n",
            "tagged": "extra: !!seq [" + ", ".join(["1"] * n) + "]\n",
            "block": "extra:\n" + "".join("  - 1\n" for _ in range(n))}[form]
    with pytest.raises(ConfigError) as err:
        parse_yaml(TINY + body, "w.yaml")
    msg = err.value.message()
    assert "more than 3,000 values" in msg and "alias" not in msg


def test_an_alias_bomb_still_blames_aliases(monkeypatch):
    monkeypatch.setattr(loader, "MAX_VALUES", 3000)
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcd", "bcde"))
    with pytest.raises(ConfigError, match="alias"):
        parse_yaml(TINY + bomb, "w.yaml")
