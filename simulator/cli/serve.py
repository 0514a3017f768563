"""``clustersim serve``: the what-if page in a browser, on this machine (docs/web.md)."""

from __future__ import annotations

import argparse
import sys

from ..optional import require

NAME = "serve"
HELP = "serve a what-if page in the browser: edit a plan, see step time, memory, timeline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; "
                        "0.0.0.0 exposes the page to the network)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--workers", type=int, default=2,
                   help="simulation worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="time budget of one simulation, seconds (default 20)")


def run(args: argparse.Namespace) -> int:
    from .common import check_numbers

    check_numbers(args, port="nonnegative", workers="positive", timeout="positive")
    if args.port > 65535:
        from ..errors import ConfigError

        raise ConfigError("--port", args.port, "must be from 0 to 65535")
    require("starlette", "serve")
    uvicorn = require("uvicorn", "serve")
    from ..web.app import allowed_hosts, create_app

    app = create_app(workers=args.workers, timeout_s=args.timeout,
                     hosts=allowed_hosts(args.host))
    print(f"clustersim serve: http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                limit_concurrency=512, timeout_keep_alive=5)
    return 0
