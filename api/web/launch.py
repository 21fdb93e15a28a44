"""`evaledger serve --open`: open the web report in a browser once the server answers."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import webbrowser

READY_LIMIT_S = 30.0


def open_when_up(base: str, path: str = "/ui/") -> threading.Thread:
    """Poll `base`/health in the background, then open `base + path` (never blocks serving)."""

    def wait_then_open() -> None:
        deadline = time.monotonic() + READY_LIMIT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):  # noqa: S310 (loopback)
                    webbrowser.open(base + path)
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)

    thread = threading.Thread(target=wait_then_open, name="open-browser", daemon=True)
    thread.start()
    return thread
