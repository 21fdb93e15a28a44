"""A TLS-terminating reverse proxy on loopback, for tests: what nginx does in front of `serve`.

It listens with a certificate made here (trustme's test CA) and forwards each request over plain
HTTP to the backend the way nginx's defaults do: `Host` becomes the backend's address
(`proxy_set_header Host $proxy_host`), `X-Forwarded-Proto: https` and `X-Forwarded-For` are
added, one request per connection. The answer is relayed byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import trustme


class TlsProxy:
    """`https://localhost:{port}` → `http://{backend}`, served from a background thread."""

    def __init__(self, backend: str, port: int, workdir: Path) -> None:
        self.backend = backend
        self.port = port
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("localhost", "127.0.0.1")
        self.server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.server_context)
        self.client_context = ssl.create_default_context()
        self.ca.configure_trust(self.client_context)
        self.ca_file = workdir / "proxy-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.requests: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base(self) -> str:
        return f"https://localhost:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, ssl=self.server_context)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            request_line, headers = lines[0], [h for h in lines[1:] if h]
            kept = [
                h
                for h in headers
                if h.split(":", 1)[0].strip().lower()
                not in ("host", "connection", "x-forwarded-for", "x-forwarded-proto")
            ]
            length = next(
                (
                    int(h.split(":", 1)[1])
                    for h in headers
                    if h.lower().startswith("content-length")
                ),
                0,
            )
            body = await reader.readexactly(length) if length else b""
            client = writer.get_extra_info("peername")[0]
            forwarded = [
                request_line,
                f"Host: {self.backend}",
                *kept,
                "X-Forwarded-Proto: https",
                f"X-Forwarded-For: {client}",
                "Connection: close",
            ]
            upstream = "\r\n".join(forwarded).encode("latin-1") + b"\r\n\r\n" + body
            self.requests.append(upstream)
            host, port = self.backend.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            up_writer.write(upstream)
            await up_writer.drain()
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
            up_writer.close()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join(30)


@contextlib.contextmanager
def tls_proxy(backend: str, port: int, workdir: Path) -> Iterator[TlsProxy]:
    """A running proxy to `backend` (`host:port`) on `port`, stopped afterwards."""
    proxy = TlsProxy(backend, port, workdir)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
