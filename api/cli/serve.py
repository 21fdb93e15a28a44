"""`evaledger serve` and `evaledger demo`: the HTTP API and web report, and a guided first look."""

from __future__ import annotations

import argparse
import sys

from evaledger.api.bootstrap import Services
from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, UsageError


def register(commands: Commands) -> None:
    """Add demo and serve."""
    commands.add(
        "demo", cmd_demo, "load the demo runs and show scores, a what-if rescore and a comparison"
    )
    p = commands.add("serve", cmd_serve, "serve the HTTP API", json=False)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (tokens needed off loopback)"
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--open", action="store_true", help="open the web report (/ui) in a browser")
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host is NAME (default: loopback names only)",
    )


def cmd_serve(services: Services, args: argparse.Namespace) -> int:
    """Serve the HTTP API; open (token-less) serving only on loopback."""
    # Deferred for start-up: every other command runs without loading FastAPI and uvicorn.
    import uvicorn

    from evaledger.api.app import create_app
    from evaledger.api.security import is_loopback

    if not services.tokens_required():
        if not is_loopback(args.host):
            raise UsageError(
                f"refusing to serve on {args.host} without API tokens: anyone who can reach it "
                "could read and write every project. Create a token first (evaledger token "
                "create --project P --scope admin) or bind 127.0.0.1."
            )
        sys.stderr.write(
            "evaledger: serving without tokens (loopback only): every local client can read "
            "and write every project\n"
        )
    if args.open:
        from evaledger.api.web.launch import open_when_up

        open_when_up(f"http://{args.host}:{args.port}")
    hosts = (*services.settings.allowed_hosts, *args.allowed_host)
    settings = services.settings.model_copy(update={"allowed_hosts": hosts})
    app = create_app(settings=settings, services=services)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return EXIT_OK


def cmd_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo runs into the store and show what they say."""
    # Deferred for start-up: only `demo` needs the demo's bundles and the judging runner.
    from evaledger.api.demo import run_demo

    return run_demo(services, args)
