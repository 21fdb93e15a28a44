"""`evaledger serve` and `evaledger demo`: the HTTP API and web report, and a guided first look."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from evaledger.api.cli.arguments import positive_int
from evaledger.api.cli.inputs import Commands
from evaledger.api.console import EXIT_OK, UsageError

if TYPE_CHECKING:
    from evaledger.api.bootstrap import Services, Settings


def register(commands: Commands) -> None:
    """Add demo, serve and worker."""
    register_worker(commands)
    commands.add(
        "demo", cmd_demo, "load the demo runs and show scores, a what-if rescore and a comparison"
    )
    p = commands.add("serve", cmd_serve, "serve the HTTP API", json=False)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (tokens needed off loopback)"
    )
    p.add_argument("--port", type=port_number, default=8000, help="port to listen on")
    p.add_argument("--open", action="store_true", help="open the web report (/ui) in a browser")
    p.add_argument(
        "--allowed-hosts",
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAMES",
        help="also answer requests whose Host is one of NAMES (comma-separated, repeatable; "
        "`*`: any). Always: the loopback names, the --public-url host and the --host address",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="where people reach the server through a proxy (https://evals.example.com): "
        "same-origin checks accept it, and an https URL makes the sign-in cookie Secure",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="proxies (comma-separated addresses or networks, `*`: any) whose X-Forwarded-For "
        "and X-Forwarded-Proto are believed (default: FORWARDED_ALLOW_IPS, else 127.0.0.1,::1)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="API worker processes (each opens the store; no per-process state is shared)",
    )
    p.add_argument(
        "--log-format", choices=("text", "json"), default="text", help="json: one object a line"
    )
    p.add_argument(
        "--verify-every",
        type=positive_seconds,
        metavar="SECONDS",
        help="verify the whole log and the read models every SECONDS in the server (what GET "
        "/verify?views=1 does); /health reports what the last check found",
    )


def register_worker(commands: Commands) -> None:
    """Add worker."""
    p = commands.add(
        "worker", cmd_worker, "run durable judge jobs from the PostgreSQL queue", json=False
    )
    p.add_argument(
        "--concurrency", type=positive_int, default=1, help="jobs run at once by this worker"
    )


def cmd_worker(services: Services, args: argparse.Namespace) -> int:
    """Run judge jobs until SIGTERM (a running job finishes first)."""
    if services.location.kind != "postgresql":
        raise UsageError(
            "evaledger worker needs a PostgreSQL store (--db postgresql://...): on SQLite the "
            "server runs judge jobs in its own process"
        )
    # lazy: FastAPI and the judge runner (the judging routes' queue), only for worker
    from evaledger.api.routes.judging import job_queue

    queue = job_queue(services)
    assert queue is not None
    queue.run_worker(concurrency=args.concurrency)
    return EXIT_OK


GRACEFUL_SHUTDOWN_S = 30
"""On SIGTERM, in-flight requests get this long to finish before the server stops."""


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port from 0 to 65535, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, got {text}")
    return value


def cmd_serve(services: Services, args: argparse.Namespace) -> int:
    """Serve the HTTP API; open (token-less) serving only on loopback."""
    # lazy: FastAPI, uvicorn and the routers: every other command runs without them
    import uvicorn

    from evaledger.api.app import SETTINGS_ENV, create_app  # lazy: FastAPI and the routers
    from evaledger.api.operation import MULTIPROC_ENV, json_line, log_config  # lazy: prometheus
    from evaledger.api.security import is_loopback  # lazy: starlette

    if not services.tokens_required():
        if not is_loopback(args.host):
            raise UsageError(
                f"refusing to serve on {args.host} without API tokens: anyone who can reach it "
                "could read and write every project. Create a token first (evaledger token "
                "create --project P --scope admin) or bind 127.0.0.1."
            )
        warning = (
            "serving without tokens (loopback only): every local client can read and write "
            "every project"
        )
        if args.log_format == "json":
            sys.stderr.write(json_line("warning", "evaledger.serve", warning) + "\n")
        else:
            sys.stderr.write(f"evaledger: {warning}\n")
    if args.open:
        from evaledger.api.web.launch import open_when_up  # lazy: webbrowser, only for --open

        open_when_up(f"http://{args.host}:{args.port}")
    settings = _serve_settings(services.settings, args)
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "proxy_headers": True,
    }
    if args.forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = args.forwarded_allow_ips
    config = log_config(args.log_format)
    if config is not None:
        options["log_config"] = config
    if args.workers == 1:
        uvicorn.run(create_app(settings=settings, services=services), **options)
        return EXIT_OK
    # Each worker is a fresh process that opens the store itself from these settings.
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    services.close()
    with tempfile.TemporaryDirectory(prefix="evaledger-metrics-") as metrics_dir:
        os.environ.setdefault(MULTIPROC_ENV, metrics_dir)
        uvicorn.run("evaledger.api.app:app_from_env", factory=True, workers=args.workers, **options)
    return EXIT_OK


def _serve_settings(settings: Settings, args: argparse.Namespace) -> Settings:
    """The store's settings with serve's options: Host allow-list, public URL, checks."""
    from pydantic import ValidationError as PydanticError  # lazy: pydantic, only for serve

    names = [h.strip() for value in args.allowed_hosts for h in value.split(",") if h.strip()]
    if args.host not in ("0.0.0.0", "::", ""):  # noqa: S104 (compared, not bound)
        names.append(args.host)  # the address bound is a name clients may use
    update: dict[str, Any] = {"allowed_hosts": (*settings.allowed_hosts, *names)}
    if args.public_url is not None:
        update["public_url"] = args.public_url
    if args.verify_every is not None:
        update["verify_every_s"] = args.verify_every
    try:
        return type(settings).model_validate({**settings.model_dump(), **update})
    except PydanticError as e:
        first = e.errors()[0]
        raise UsageError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None


def cmd_demo(services: Services, args: argparse.Namespace) -> int:
    """Load the demo runs into the store and show what they say."""
    # lazy: the demo's bundles and the judging runner, only for demo
    from evaledger.api.demo import run_demo

    return run_demo(services, args)
