"""Step times from MLPerf Training logs (simulator/validation/mlperf_logs.py), on synthetic
logs whose answer is known: the three ways a log lets a step be timed, and the CLI."""

from __future__ import annotations

import json

import pytest

from simulator.validation.mlperf_logs import (
    block_steps,
    events,
    main,
    throughput_steps,
    timings,
    tracked_steps,
)


def _line(t_ms: float, key: str, value=None, **meta) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t_ms, "event_type": "POINT",
                                     "key": key, "value": value, "metadata": meta})


def _eval_counted_log(gbs=8, steps=(10, 5), step_s=(2.0, 3.0)) -> str:
    """Blocks timed by start / stop, their steps from cumulative eval_start samples counts;
    a tracked throughput inside each block and a summary throughput after the run."""
    lines = ["noise before", _line(0, "global_batch_size", gbs)]
    t, seen = 1000.0, 0
    for n, s in zip(steps, step_s, strict=True):
        lines.append(_line(t, "block_start", samples_count=seen))
        lines.append(_line(t + 1, "tracked_stats", {"throughput": gbs / s}))
        t += n * s * 1000
        lines.append(_line(t, "block_stop"))
        seen += n * gbs
        lines.append(_line(t, "eval_start", samples_count=seen))
        t += 500  # evaluation, outside the blocks
    lines.append(_line(t, "tracked_stats", {"throughput": 123.0}))  # run summary
    return "\n".join(lines)


def test_blocks_count_steps_from_eval_samples():
    evs = events(_eval_counted_log())
    assert block_steps(evs) == pytest.approx([2.0, 3.0])
    assert throughput_steps(evs) == pytest.approx([2.0, 3.0])  # the summary is no block


def test_blocks_count_tokens_where_the_log_does():
    # GPT-3 style: epoch_count = steps x GBS x sequence length tokens
    gbs, seq = 4, 2048
    text = "\n".join([_line(0, "global_batch_size", gbs), _line(0, "max_sequence_length", seq),
                      _line(1000, "block_start", epoch_count=12 * gbs * seq),
                      _line(1000 + 12 * 1500, "block_stop")])
    assert block_steps(events(text)) == pytest.approx([1.5])
    bare = text.replace(_line(0, "max_sequence_length", seq) + "\n", "")
    assert block_steps(events(bare)) == []  # tokens but no length: not timed
    assert block_steps(events(bare), seq=seq) == pytest.approx([1.5])


def test_logs_without_block_stop_are_timed_by_their_tracked_steps():
    lines = [_line(0, "global_batch_size", 16)]
    for b, per_step in enumerate((19.0, 21.0)):
        lines.append(_line(1000 * b, "block_start"))
        lines += [_line(1000 * b + i, "tracked_stats", {"train_step_time": per_step + d})
                  for i, d in enumerate((-0.5, 0.5))]
    evs = events("\n".join(lines))
    assert block_steps(evs) == []
    assert tracked_steps(evs) == pytest.approx([19.0, 21.0])
    (only,) = timings(["\n".join(lines)])
    assert only.method == "tracked" and only.median == pytest.approx(20.0) and only.logs == 1


def test_timings_pool_every_block_of_every_log():
    found = {t.method: t for t in timings([_eval_counted_log(), _eval_counted_log(),
                                           "no mllog lines at all"])}
    assert set(found) == {"blocks", "throughput"}
    assert found["blocks"].logs == 2 and len(found["blocks"].blocks) == 4
    assert found["blocks"].median == pytest.approx(2.5)


def test_cli_reads_a_folder_and_refuses_what_it_cannot_time(tmp_path, capsys):
    (tmp_path / "result_0.txt").write_text(_eval_counted_log())
    (tmp_path / "result_1.txt").write_text(_eval_counted_log(step_s=(4.0, 4.0)))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| blocks | 2 | 4 | 3.5000 | 2.0000 | 4.0000 |" in out
    assert main([str(tmp_path / "missing.txt")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "result_0.txt").write_text("nothing here")
    assert main([str(empty)]) == 2
    assert "no timed training block" in capsys.readouterr().err
