"""``clustersim serve``: the what-if page in a browser, on this machine (docs/web.md)."""

from __future__ import annotations

import argparse
import socket
import sys

from ..errors import ConfigError
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


def _check_listen(host: str, port: int) -> None:
    """A one-line error now, rather than the server's log line later, when the address
    cannot be listened on (a port in use, a host that is not this machine's)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(infos[0][4])
    except OSError as exc:
        raise ConfigError("--port", port, f"cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from .common import check_numbers

    check_numbers(args, port="nonnegative", workers="positive", timeout="positive")
    if args.port > 65535:
        raise ConfigError("--port", args.port, "must be from 0 to 65535")
    _check_listen(args.host, args.port)
    require("starlette", "serve")
    uvicorn = require("uvicorn", "serve")
    from ..web.app import allowed_hosts, create_app

    app = create_app(workers=args.workers, timeout_s=args.timeout,
                     hosts=allowed_hosts(args.host))
    print(f"clustersim serve: http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                limit_concurrency=512, timeout_keep_alive=5)
    return 0
