"""``clustersim`` entry point: dispatch to subcommands, turn ConfigError into exit 2.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; register it with one line
in ``COMMANDS`` (name -> module, help). Only the chosen command's module is
imported, so ``clustersim run`` never pays for matplotlib or pandas, which
other commands need; ``clustersim --help`` lists every command from the table
alone. (``tests/test_cli_startup.py`` checks the table's help matches each
module's ``HELP``.)

Bare ``clustersim`` prints the usage and the command list and exits 2, like
any other incomplete command line. User mistakes raise
:class:`simulator.errors.ConfigError` and are printed as one line on stderr
with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from ..errors import ConfigError, Note
from ..version import __version__

# name -> (module, one-line help). Keep the help equal to the module's HELP.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("simulator.cli.run", "simulate one training step of WORKLOAD on a topology"),
    "collective": ("simulator.cli.collective",
                   "predict an NCCL collective's time and bus bandwidth over message sizes"),
    "moe-balance": ("simulator.cli.moe_balance",
                    "simulate MoE router load balancing (none / aux loss / aux-free bias) "
                    "over steps"),
    "memory": ("simulator.cli.memory", "Per-GPU memory of each pipeline stage (parameters, "
               "grads, optimizer, activations)."),
    "validate": ("simulator.cli.validate", "compare predictions with published measurements "
                 "and write reports/validation.md"),
    "sweep": ("simulator.cli.sweep", "simulate every configuration of a sweep YAML (axes over "
              "any field) into CSV/Parquet"),
    "search": ("simulator.cli.search",
               "rank every parallel plan of WORKLOAD on N GPUs by simulated throughput"),
    "plot": ("simulator.cli.plot", "plot step-time breakdowns, pipeline timelines, memory, "
             "scaling or expert load"),
    "trace": ("simulator.cli.trace",
              "write a Chrome/Perfetto trace (JSON) of one simulated step of WORKLOAD"),
    "workload": ("simulator.cli.workload",
                 "write a workload YAML from a Hugging Face config.json and a parallel plan"),
    "list": ("simulator.cli.listing", "list the shipped workloads, topologies and sweeps"),
    "sensitivity": ("simulator.cli.sensitivity", "elasticity of step time and memory to each "
                    "GPU and network constant (would a faster fabric help this plan?)"),
    "time-to-train": ("simulator.cli.time_to_train", "Days, GPU-hours, interruptions, goodput, "
                      "energy and cost to train on N tokens."),
    "capacity": ("simulator.cli.capacity", "best plan, days, cost, energy and network bill "
                 "of materials of WORKLOAD per topology and GPU count, with the cost-time "
                 "frontier"),
    "calibrate": ("simulator.cli.calibrate", "fit a topology's constants to your measurements "
                  "(nccl-tests, kernel timings, profiler traces, step times / logs) and write a "
                  "calibrated topology"),
    "bench-kernels": ("simulator.cli.bench_kernels", "time GEMM and attention kernels on this "
                      "GPU with torch and write the CSV `clustersim calibrate` reads"),
    "serve": ("simulator.cli.serve", "serve a what-if page in the browser: edit a plan, see "
              "step time, memory, timeline"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: also one line, exit 2
        self.exit(2, f"clustersim: error: {message}\n")


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line: the first word that is not an option.

    The top-level parser has only flag options (``-h``, ``--version``), none taking a
    value, so the first non-option word is the command.
    """
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None, siblings: bool = True) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (all of them when ``None``).

    ``siblings=False`` leaves the other commands out altogether (each is a parser to
    build): for a command line that starts with the command, where nothing can print the
    top-level help and an unknown command cannot occur."""
    parser = _Parser(prog="clustersim",
                     description="Discrete-event performance simulator for LLM training "
                                 "clusters.",
                     epilog="`clustersim COMMAND --help` explains a command.")
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_) in COMMANDS.items():
        if command is None or name == command:
            mod = importlib.import_module(module)
            p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
        elif siblings:  # listed in --help; its module loads only when it is the one chosen
            sub.add_parser(name, help=help_)
    return parser


_NOTED: set[str] = set()


def _show_note(message, category, *rest, _show=warnings.showwarning, **kw) -> None:
    """A :class:`~simulator.errors.Note` (a visible default, e.g. the HF import's) is
    one ``note:`` line on stderr; any other warning is shown as Python shows it."""
    if issubclass(category, Note):
        if str(message) not in _NOTED:  # a document read twice notes once
            _NOTED.add(str(message))
            print(f"note: {message}", file=sys.stderr)
    else:
        _show(message, category, *rest, **kw)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    known = command in COMMANDS
    parser = build_parser(command if known else "", siblings=not (known and argv[0] == command))
    args = parser.parse_args(argv)
    if args.command is None:  # bare `clustersim`: usage and the command list, exit 2
        parser.print_help(sys.stderr)
        return 2
    try:
        _NOTED.clear()  # per command (tests call main() many times in one process)
        with warnings.catch_warnings():
            warnings.simplefilter("always", Note)  # notes show whatever -W / PYTHONWARNINGS
            warnings.showwarning = _show_note
            return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"clustersim: error: {exc.message()}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
