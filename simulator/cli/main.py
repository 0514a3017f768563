"""``clustersim`` entry point: dispatch to subcommands, turn ConfigError into exit 2.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; register it in
``COMMANDS``. User mistakes raise :class:`simulator.errors.ConfigError` and
are printed as one line on stderr with exit status 2; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import ConfigError

COMMANDS = [
    "simulator.cli.run",
    "simulator.cli.collective",
    "simulator.cli.moe_balance",
    "simulator.cli.memory",
    "simulator.cli.validate",
    "simulator.cli.sweep",
    "simulator.cli.search",
    "simulator.cli.plot",
    "simulator.cli.trace",
    "simulator.cli.time_to_train",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: also one line, exit 2
        self.exit(2, f"clustersim: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clustersim",
                     description="Discrete-event performance simulator for LLM training "
                                 "clusters.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        mod = importlib.import_module(name)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"clustersim: error: {exc.message()}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
