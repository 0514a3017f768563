"""Start-up hygiene: what `import simulator` and the CLI load, and the CLI's table of commands.

The speed itself is a benchmark (benchmarks/bench_startup.py); here we only check, in a
fresh interpreter, that the heavy optional libraries stay out of sys.modules.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import simulator
from simulator.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "dask", "distributed", "pyarrow")


def _stdout(probe: str) -> str:
    """What a fresh interpreter running ``probe`` prints."""
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, check=True).stdout


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\n"
             f"import json; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = _stdout(probe)
    return json.loads(out.splitlines()[-1])


def test_import_simulator_loads_no_heavy_library():
    assert _loaded_after("import simulator") == []


def test_simpy_loads_with_the_event_loop_only():
    probe = ("import sys, simulator\nprint('simpy' in sys.modules)\n"
             "from simulator.api import resolve, simulate_resolved\n"
             "simulate_resolved(*resolve('tiny', 'dgx-h100', {}, None), keep_records=True)\n"
             "print('simpy' in sys.modules)")
    out = _stdout(probe)
    assert out.split() == ["False", "True"]


def test_cli_run_loads_no_heavy_library():
    code = ("from simulator.cli.main import main\n"
            "assert main(['run', 'tiny', '-t', 'dgx-h100', '--format', 'json']) == 0")
    assert _loaded_after(code) == []


def test_cli_run_loads_neither_time_to_train_models_nor_difflib_nor_simpy():
    """Start-up budget (issue 16): the Monte-Carlo and time-to-train models and the
    did-you-mean hints load on use; the plain run replays directly and never starts SimPy's
    event loop. The expected step's variability model is part of every step."""
    probe = ("import sys\nfrom simulator.cli.main import main\n"
             "assert main(['run', 'llama3-405b', '-t', 'dgx-h100', '--format', 'json']) == 0\n"
             "assert main(['run', 'mixtral-8x7b', '-t', 'dgx-h100', '--format', 'json']) == 0\n"
             "print([m for m in ('simulator.reliability.run', 'simulator.reliability.failures',"
             " 'simulator.reliability.checkpoint', 'difflib', 'simpy') if m in sys.modules])\n"
             "print('simulator.metrics.variability' in sys.modules)")
    out = _stdout(probe)
    assert out.splitlines()[-2:] == ["[]", "True"]


def test_sweep_and_search_are_the_functions_even_after_the_subpackage_loads():
    pkg = importlib.import_module("simulator.sweep")
    assert simulator.sweep is pkg.sweep and simulator.search is pkg.search
    from simulator import search, sweep
    assert callable(sweep) and callable(search)
    assert {"sweep", "search"} <= set(dir(simulator))


def test_command_table_help_matches_each_module():
    for name, (module, help_) in cli.COMMANDS.items():
        mod = importlib.import_module(module)
        assert (name, help_) == (mod.NAME, mod.HELP), module


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)


def test_help_before_a_command_still_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["-h", "run"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)


def test_a_command_line_starting_with_its_command_builds_that_command_only():
    parser = cli.build_parser("run", siblings=False)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["run"]
    assert parser.parse_args(["run", "tiny", "-t", "dgx-h100"]).workload == "tiny"


def test_bare_command_prints_usage_and_exits_2(capsys):
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: clustersim") and "run" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"clustersim {simulator.__version__}"


def test_python_dash_m_simulator():
    proc = subprocess.run([sys.executable, "-m", "simulator", "list", "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    names = json.loads(proc.stdout)
    assert {"llama3-8b", "tiny"} <= set(names["workloads"])
    assert {"dgx-h100", "gb200-nvl72"} <= set(names["topologies"])
    assert "llama3-70b-plans" in names["sweeps"]


def test_cli_run_validates_without_pydantics_model_layer():
    """The config is validated by pydantic-core directly (simulator/config/schema.py): a run
    loads neither pydantic's BaseModel machinery nor annotated_types, and so never scans
    the installed distributions for pydantic plugins."""
    probe = ("import sys\nfrom simulator.cli.main import main\n"
             "assert main(['run', 'mixtral-8x7b', '-t', 'gb200-nvl72', '--format', 'json']) == 0\n"
             "print(sorted(m for m in sys.modules if m == 'importlib.metadata'"
             " or m.split('.')[0] in ('pydantic', 'annotated_types')))")
    out = _stdout(probe)
    assert out.splitlines()[-1] == "[]"


def test_version_imports_no_simulator_module_beyond_the_cli():
    """``clustersim --version`` answers from the package file (issue 33.7): no numpy, no
    simulator module past ``errors``, ``version`` and the CLI's entry module."""
    probe = ("import sys\nfrom simulator.cli.main import main\n"
             "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('simulator')), "
             "'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().endswith("False"), out
    # simulator, .cli, .cli.main, .errors, .version (the one file the version is written in)
    assert out.count("'simulator") == 5, out
