"""Intervals from out-of-sample errors (simulator/metrics/uncertainty.py), on synthetic pools
where the answer is known, and through the public API and CLI."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.metrics import uncertainty
from simulator.metrics.uncertainty import (
    MIN_GROUPS,
    Plan,
    band,
    bias,
    group_quantile,
    interval,
)

H100 = "H100-SXM5-80GB"
TERMS = {"release": 0.02, "precision": 0.05, "scale": 0.01, "gpu": 0.15, "plan": 0.05,
         "stack": 0.15}


def _rec(err, group, gpu=H100, prec="bf16", n=64, cat="dense_step_time", stack="megatron",
         seq=4096, schedule="1f1b", dispatcher=""):
    return {"error": math.expm1(err), "group": group, "gpu": gpu, "precision": prec,
            "num_gpus": n, "category": cat, "stack": stack, "seq_length": seq,
            "schedule": schedule, "dispatcher": dispatcher}


def _pool(errors, **kw):
    """One record per group, log errors ``errors``."""
    return [_rec(e, f"g{i}", **kw) for i, e in enumerate(errors)]


PLAN = Plan("dense_step_time", H100, "bf16", 64, 4096, "", "1f1b")


def test_group_quantile_is_the_conformal_rank_with_each_group_once():
    # 9 groups of one record: level 0.8 * (1 + 1/9) = 0.889 -> the 8th smallest of 9
    scores = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09]
    assert group_quantile(_pool(scores), 0.0) == pytest.approx(0.08)
    # a group of 100 near twins weighs what one record does (unweighted: rank 89 of 108, 0.01)
    twins = _pool(scores) + [_rec(0.01, "g0") for _ in range(99)]
    assert group_quantile(twins, 0.0) == pytest.approx(0.08)


def test_bias_is_corrected_only_when_the_group_means_say_so():
    shifted = _pool([0.04, 0.05, 0.03, 0.06, 0.04, 0.05, 0.03, 0.04, 0.05])
    assert bias(shifted) == pytest.approx(0.0433, abs=1e-3)
    noisy = _pool([0.04, -0.05, 0.03, -0.06, 0.04, -0.05, 0.03, -0.04, 0.05])
    assert bias(noisy) == 0.0
    b, q, claim, _, notes = band(shifted, TERMS, PLAN)
    assert b == pytest.approx(bias(shifted)) and claim == 0.8 and notes == ()
    # centred on the bias: the interval of a +4 % biased model sits below the prediction
    assert 10 * math.exp(-b + q) < 10.0  # every shifted group predicted high
    assert band(noisy, TERMS, PLAN)[0] == 0.0


def test_fewer_groups_than_the_minimum_claim_no_coverage():
    few = _pool([0.01 * i for i in range(MIN_GROUPS - 1)])
    _, q, claim, _, notes = band(few, TERMS, PLAN)
    assert q is not None and claim is None and any("coverage unknown" in n for n in notes)
    enough = _pool([0.01 * i for i in range(MIN_GROUPS)])
    assert band(enough, TERMS, PLAN)[2] == 0.8


@pytest.mark.parametrize("change, term", [
    ({"gpu": "B300"}, "gpu"), ({"precision": "fp4"}, "precision"),
    ({"schedule": "dualpipe"}, "plan"), ({"stack": "torchtitan"}, "stack"),
    ({"num_gpus": 1024}, "scale"), ({"seq_length": 32768}, "plan")])
def test_each_dimension_outside_the_validated_space_widens_and_drops_the_claim(change, term):
    pool = _pool([0.01 * (-1) ** i * i for i in range(12)])
    _, q0, c0, _, _ = band(pool, TERMS, PLAN)
    far = Plan(**{**PLAN.__dict__, **change})
    _, q, claim, _, notes = band(pool, TERMS, far)
    z = 1.2815515655446004  # the 90th percentile of the normal
    if "stack" in change:  # another stack: the stack's (empty) stratum borrows the pool
        assert q >= math.sqrt(q0 ** 2 + (z * TERMS["stack"]) ** 2) - 1e-12
    else:
        assert q == pytest.approx(math.sqrt(q0 ** 2 + (z * TERMS[term]) ** 2))
    assert c0 == 0.8 and claim is None
    assert any("widened" in n and str(next(iter(change.values()))) in n for n in notes)


def test_far_beyond_the_validated_scale_gives_no_interval():
    pool = _pool([0.01 * i for i in range(12)])
    _, q, claim, _, notes = band(pool, TERMS, Plan(**{**PLAN.__dict__, "num_gpus": 64 * 17}))
    assert q is None and claim is None and "far outside" in notes[0]
    assert band([], TERMS, PLAN)[1] is None


def test_a_borrowed_pool_is_never_narrower_than_the_categorys_own_errors():
    dense = _pool([0.01] * 12)
    moe = [_rec(e, f"m{i}", cat="moe_step_time") for i, e in enumerate((0.2, -0.2, 0.1))]
    _, q, claim, _, notes = band(dense + moe, TERMS, Plan(**{**PLAN.__dict__,
                                                              "category": "moe_step_time"}))
    assert q >= 0.2 - 1e-12 and claim is None and "fewer than" in notes[0]


def test_result_api_and_cli_carry_the_interval(capsys):
    r = simulate("llama3-8b", "dgx-h100")
    iv = r.step_time_interval_s
    assert iv["low"] < r.step_time_s < iv["high"] and r.interval_coverage == 0.8
    assert "groups" in r.interval_basis and "bias" in r.interval_basis
    assert r.tokens_per_s_interval["low"] == pytest.approx(r.tokens_per_s * r.step_time_s
                                                           / iv["high"])
    assert r.mfu_interval["high"] == pytest.approx(r.mfu * r.step_time_s / iv["low"])
    assert main(["run", "llama3-8b", "-t", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    assert f"({iv['low']:#.3g}-{iv['high']:#.3g} s, 80 %)" in out


def test_a_plan_outside_the_validated_space_says_coverage_unknown(capsys):
    r = simulate("mixtral-8x7b", "dgx-h100")  # MoE: fewer than MIN_GROUPS H100 groups
    assert r.interval_coverage is None and r.step_time_interval_s["low"] is not None
    assert any("coverage unknown" in n for n in r.notes)
    assert main(["run", "mixtral-8x7b", "-t", "dgx-h100"]) == 0
    assert "coverage unknown)" in capsys.readouterr().out


def test_the_committed_pool_is_used_and_the_plan_key_matters():
    a = interval(10.0, PLAN)
    b = interval(10.0, Plan(**{**PLAN.__dict__, "gpu": "no-such-gpu"}))
    assert a.coverage == 0.8 and b.coverage is None and b.high - b.low > a.high - a.low


def test_uncertainty_module_is_cheap_to_import():
    tree = ast.parse(Path(uncertainty.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert not names & {"pandas", "scipy", "simulator"}
    assert uncertainty.POOL.is_file()


def test_a_stack_with_few_groups_keeps_the_stack_term():
    """Two validated groups of a stack do not measure its offset: its plans borrow the whole
    pool and are widened by the stack term, as an unseen stack's are; a stack with a stratum
    of its own is not."""
    pool = _pool([0.01 * (-1) ** i * i for i in range(12)])
    two = [*pool, _rec(0.12, "t0", stack="torchtitan"), _rec(0.10, "t1", stack="torchtitan")]
    tt = Plan(**{**PLAN.__dict__, "stack": "torchtitan"})
    n_none = band(pool, TERMS, tt)[4]
    _, q_two, _, _, n_two = band(two, TERMS, tt)
    assert any("stack torchtitan not validated" in n for n in n_none)
    assert any("stack torchtitan validated by 2 groups" in n for n in n_two)
    z = 1.2815515655446004
    q_pool = band(two, TERMS, PLAN)[1]  # the same pool, unwidened, for a megatron plan
    assert q_two >= math.sqrt(q_pool ** 2 + (z * TERMS["stack"]) ** 2) - 1e-12
    many = _pool([0.01 * (-1) ** i * i for i in range(12)], stack="torchtitan")
    assert not any("stack" in n for n in band(many, TERMS, tt)[4])


def test_one_group_on_a_gpu_keeps_the_gpu_term():
    """One validated group on a GPU cannot tell the GPU's error from its plan's: a plan on it
    keeps the gpu widening term, as on an unseen GPU; two groups shed it."""
    pool = _pool([0.01 * (-1) ** i * i for i in range(12)])
    b200 = Plan(**{**PLAN.__dict__, "gpu": "B200"})
    one = [*pool, _rec(0.02, "b0", gpu="B200")]
    two = [*one, _rec(-0.01, "b1", gpu="B200")]
    notes_none, (_, q_one, _, _, notes_one) = band(pool, TERMS, b200)[4], band(one, TERMS, b200)
    assert any("gpu B200 not validated" in n for n in notes_none)
    assert any("gpu B200 validated by 1 group" in n for n in notes_one)
    z = 1.2815515655446004
    assert q_one >= math.sqrt(band(one, TERMS, PLAN)[1] ** 2 + (z * TERMS["gpu"]) ** 2) - 1e-12
    assert not any("gpu B200" in n for n in band(two, TERMS, b200)[4])
