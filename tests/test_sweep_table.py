"""The sweep table without pandas: the CSV the CLI writes equals pandas' ``to_csv`` text,
and ``clustersim sweep`` to CSV never imports pandas (issue 16's sweep rate counts it)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from simulator.sweep import make_spec, sweep_table, write_csv
from simulator.sweep.table import Table

ROOT = Path(__file__).resolve().parents[1]


def _pandas_text(table: Table) -> str:
    out = io.StringIO()
    table.frame().to_csv(out, index=False)
    return out.getvalue()


def _text(table: Table) -> str:
    out = io.StringIO()
    table.write_csv(out)
    return out.getvalue()


def test_every_column_kind_is_written_as_pandas_writes_it():
    nan = float("nan")
    cols = {
        "int": [1, 2, 3, 4],
        "int_gaps": [1, None, 3, nan],  # nullable Int64
        "float_gaps": [0.1, None, 1e-05, 2.0],
        "int_and_float": [1, 2.5, None, 10**17],  # float64: 1 -> 1.0
        "big_and_small": [1e16, 123456789.123, -0.0, float("inf")],
        "bool": [True, False, True, False],
        "bool_gaps": [True, None, False, None],  # nullable boolean
        "bool_and_int": [True, 1, None, 0],  # object
        "text": ["a,b", 'say "hi"', "two\nlines", ""],
        "mixed": ["x", 1, 2.5, None],
        "list": [[1, 2], None, [], [0.5]],
        "empty": [None, None, nan, None],
    }
    rows = [{k: v[i] for k, v in cols.items()} for i in range(4)]
    rows[3].pop("text")  # a key a row does not have is a gap too
    table = Table(rows, list(cols))
    assert _text(table) == _pandas_text(table)


def test_sweep_with_invalid_rows_matches_the_frame(tmp_path):
    spec = make_spec("tiny", "dgx-h100", {"parallelism.tensor": [1, 2, 3], "num_gpus": [8]},
                     None, {}, {})
    table = sweep_table(spec, executor="serial")
    assert [r["status"] for r in table.rows] == ["ok", "ok", "invalid"]
    assert _text(table) == _pandas_text(table)
    write_csv(table, tmp_path / "plain.csv")
    write_csv(table.frame(), tmp_path / "frame.csv")
    assert (tmp_path / "plain.csv").read_bytes() == (tmp_path / "frame.csv").read_bytes()
    assert table.frame().attrs["counts"] == table.counts


def test_cli_sweep_to_csv_loads_no_pandas():
    """Nor tqdm (no bar is drawn off a terminal) nor the reliability models (no
    time_to_train block): what a fresh sweep does not use, it does not load."""
    lazy = ("pandas", "tqdm", "simulator.reliability.run")
    probe = ("import sys\nfrom simulator.cli.main import main\n"
             "assert main(['sweep', 'llama3-70b-plans', '--executor', 'serial']) == 0\n"
             f"print([m for m in {lazy!r} if m in sys.modules], file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert proc.stderr.splitlines()[-1] == "[]"
    assert proc.stdout.startswith("config_id,status,reason,config_key,")
    assert len(proc.stdout.splitlines()) == 25  # header + 24 configurations
