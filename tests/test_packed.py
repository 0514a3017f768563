"""Packed fine-tuning data (``training.packed_document_length``) and Megatron-Core's
``disable_parameter_transpose_cache``.

Closed forms: documents of lengths ``L_i`` packed into one ``s``-token sequence attend within
themselves, so the attention square is ``sum_i L_i^2 = s * L_w`` (``L_w`` the length-weighted
mean, the field's value) instead of ``s^2``; everything else in the layer is unchanged. With
the transpose cache off, each micro-batch pays the FP8 weights' bytes that a cached run pays
once a step.
"""

from __future__ import annotations

import pytest

from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.metrics.flops import forward_flops_per_sequence
from simulator.workload.ops import layer_forward

H, A, KV, D, S, LAYERS = 4096, 32, 8, 128, 4096, 32
MODEL = {"name": "llama3-8b", "num_layers": LAYERS, "hidden_size": H, "num_attention_heads": A,
         "num_query_groups": KV, "ffn_hidden_size": 14336, "gated_linear_unit": True,
         "vocab_size": 128256, "seq_length": S, "hidden_dropout": 0.0,
         "attention_dropout": 0.0, "untie_embeddings_and_output_weights": True}
BASE = {"model": MODEL, "parallelism": {"tensor": 2, "pipeline": 1, "data": 4},
        "training": {"global_batch_size": 32, "micro_batch_size": 1, "precision": "bf16"}}


def _w(over: dict | None = None):
    return resolve(BASE, "dgx-h100", over or {}, {})


def _op(w, name):
    return next(op for op in layer_forward(w) if op.name == name)


@pytest.mark.parametrize("doc", [128.0, 230.0, 1024.0])
def test_attention_square_is_the_documents_own(doc):
    whole, _ = _w()
    packed, _ = _w({"training.packed_document_length": doc})
    a, p = _op(whole, "attention"), _op(packed, "attention")
    heads_per_rank = A / 2
    # 4 * b * s * L_w * heads * d, half of it under the causal mask
    assert p.flops == pytest.approx(0.5 * 4.0 * S * doc * heads_per_rank * D)
    assert a.flops == pytest.approx(0.5 * 4.0 * S * S * heads_per_rank * D)
    assert p.attn[1] == doc and a.attn[1] == S  # the kernel's rows see L_w keys
    # nothing else in the layer moves
    rest = lambda w: [(o.name, o.flops, o.nbytes) for o in layer_forward(w)  # noqa: E731
                      if o.name != "attention"]
    assert rest(whole) == rest(packed)
    # model FLOPs: the full-square convention, over each document
    diff = forward_flops_per_sequence(whole) - forward_flops_per_sequence(packed)
    assert diff == pytest.approx(LAYERS * 4.0 * S * (S - doc) * A * D)


def test_packed_steps_are_faster_and_a_whole_sequence_document_changes_nothing():
    times = []
    for doc in (None, float(S), 2048.0, 512.0, 128.0):
        w, t = _w({"training.packed_document_length": doc})
        times.append(simulate_resolved(w, t)[0].step_time_s)
    assert times[1] == pytest.approx(times[0], rel=1e-12)
    assert times[1] > times[2] > times[3] > times[4]
    # the attention is what went: a few per cent of an 8B step at 4K, not more
    assert 0.0 < 1 - times[4] / times[0] < 0.15


def test_packed_documents_it_cannot_cost_are_one_line(capsys):
    with pytest.raises(ConfigError, match=r"training\.packed_document_length"):
        _w({"training.packed_document_length": S + 1.0})
    with pytest.raises(ConfigError, match="2 x context"):
        _w({"training.packed_document_length": 3.0, "parallelism.context": 2,
            "parallelism.data": 2})
    with pytest.raises(ConfigError, match="use_flash_attn"):
        _w({"training.packed_document_length": 512.0, "training.use_flash_attn": False})
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set",
                 "training.packed_document_length=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.packed_document_length" in err[0]
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set",
                 "training.packed_document_length=300"]) == 0
    assert "packed documents of 300 tokens" in capsys.readouterr().out.splitlines()[0]


def test_transpose_cache_off_pays_the_weights_every_micro_batch():
    fp8 = {"training.precision": "fp8", "training.fp8_recipe": "tensorwise",
           "training.fp8_param_gather": True}
    cached, _ = _w(fp8)
    off, _ = _w({**fp8, "training.disable_parameter_transpose_cache": True})
    m = cached.num_microbatches
    assert m == 8
    for name in ("qkv_fp8_cast", "fc2_fp8_cast"):
        c, o = _op(cached, name), _op(off, name)
        _, n, k = next(op for op in layer_forward(cached) if op.name == name[:-9]).shape
        # fp8_param_gather: the transpose only, read 1 B + write 1 B a parameter
        assert o.nbytes - c.nbytes == pytest.approx(2.0 * n * k * (1 - 1 / m))
        assert o.bwd_nbytes == c.bwd_nbytes
    bf16_off, _ = _w({"training.disable_parameter_transpose_cache": True})
    bf16, _ = _w()
    assert [o.nbytes for o in layer_forward(bf16_off)] == [o.nbytes for o in layer_forward(bf16)]


def test_under_context_parallelism_each_document_is_split_over_the_ring():
    """CP 2 (ring, zigzag): every document is split into 2 x CP chunks, so the ring's blocks
    carry the documents' squares (the packed attention over the ranks) in blocks of
    ``L_w / CP`` keys, while each step still passes the rank's whole KV chunk."""
    cp = {"parallelism.context": 2, "parallelism.data": 2}
    whole, t = _w(cp)
    same, _ = _w({**cp, "training.packed_document_length": float(S)})
    packed, _ = _w({**cp, "training.packed_document_length": 256.0})
    r_whole, r_same, r_packed = (simulate_resolved(w, t)[0] for w in (whole, same, packed))
    assert r_same.step_time_s == pytest.approx(r_whole.step_time_s, rel=1e-12)
    assert r_packed.step_time_s < r_whole.step_time_s
    # the same exchange behind less compute: no less of it exposed
    assert r_packed.exposed_comm_s["cp"] >= r_whole.exposed_comm_s["cp"]
    # each rank's attention op holds its share of the documents' squares
    a = _op(packed, "attention")
    assert a.flops == pytest.approx(0.5 * 4.0 * (S / 2) * 256.0 * (A / 2) * D)
