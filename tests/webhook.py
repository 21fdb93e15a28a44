"""A webhook receiver on loopback for the alert tests: an HTTP server in a thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Hook:
    """A loopback webhook: the POSTs it got, and the statuses it answers (then 200)."""

    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


@contextmanager
def webhook() -> Iterator[Hook]:
    """Serve a webhook on 127.0.0.1 (a free port) until the block ends."""
    state = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.posts.append({"headers": dict(self.headers), "body": json.loads(body)})
            status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/evaledger"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
