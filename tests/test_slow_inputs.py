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
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcd", "bcde", strict=True))
    with pytest.raises(ConfigError, match="alias"):
        parse_yaml(TINY + bomb, "w.yaml")


def test_routing_to_every_expert_draws_nothing():
    """router_topk = num_experts (DeepSeek-V3 with 256 of 256) used to score every token
    against every expert with Gumbel noise (45 s); every expert simply gets every token."""
    import numpy as np

    from simulator.moe.batch import topk_counts_rows
    from simulator.moe.sampling import rng_for, topk_counts

    rng = rng_for(0, 1)
    before = rng.bit_generator.state
    logits = 3.0 * np.random.default_rng(1).standard_normal((61, 256))
    assert (topk_counts_rows(logits, 4096, 256, rng) == 4096).all()
    assert (topk_counts(logits[0], 4096, 256, rng) == 4096).all()
    assert rng.bit_generator.state == before
