"""The exporter's HTTP edge: /metrics serves the last snapshot, /healthz its freshness.

A scrape never waits on collection: it returns the bytes the loop rendered last (gzip when
the scraper asks for it). TLS and basic auth come from the exporter-toolkit web config.

Built on the standard library's threading HTTP server, not an async framework: every answer is
a ready byte string, so a thread per connection costs nothing, and the node agent stays small
(aiohttp alone added ~20 MiB of RSS to a process that needs ~20 MiB).
"""

from __future__ import annotations

import socket
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from exporter.collection import CollectionLoop
from exporter.exposition import CONTENT_TYPE
from exporter.webconfig import WebConfig

_LANDING = b"""<html><head><title>gpuwarden exporter</title></head><body>
<h1>gpuwarden exporter</h1><p><a href="/metrics">metrics</a> &middot;
<a href="/healthz">healthz</a></p></body></html>
"""
CLIENT_TIMEOUT = 30.0  # seconds a connection may idle or dawdle in a TLS handshake


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes
    # Headers and body go out as two writes; with Nagle on, the second waits for the client's
    # delayed ACK (40 ms a scrape on a kept-alive connection).
    disable_nagle_algorithm = True
    server: MetricsServer
    timeout = CLIENT_TIMEOUT
    _body = True

    def do_GET(self) -> None:  # http.server dispatches on this name
        self._route()

    def do_HEAD(self) -> None:  # probes that ask for headers only, as aiohttp answered them
        self._route(body=False)

    def _route(self, body: bool = True) -> None:
        self._body = body
        path = urlsplit(self.path).path
        wc = self.server.web_config
        # /healthz stays open for liveness probes (it says only whether collection is fresh).
        if (
            path != "/healthz"
            and wc.auth_required
            and not wc.check_authorization(self.headers.get("Authorization"))
        ):
            self._send(
                401,
                b"Unauthorized\n",
                "text/plain",
                {"WWW-Authenticate": 'Basic realm="gpuwarden"'},
            )
        elif path == "/metrics":
            snap = self.server.loop.snapshot
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                self._send(200, snap.gzipped(), CONTENT_TYPE, {"Content-Encoding": "gzip"})
            else:
                self._send(200, snap.body, CONTENT_TYPE)
        elif path == "/healthz":
            ok, reason = self.server.loop.health(self.server.stale_after)
            self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
        elif path == "/":
            self._send(200, _LANDING, "text/html")
        else:
            self._send(404, b"404: Not Found\n", "text/plain")

    def _send(
        self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self._body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """No access log (a scrape every few seconds is not news)."""


class MetricsServer(ThreadingHTTPServer):
    """Serves one collection loop on ``(host, port)``; TLS when the web config has it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        loop: CollectionLoop,
        stale_after: float,
        web_config: WebConfig | None,
        address: tuple[str, int],
    ) -> None:
        self.loop = loop
        self.stale_after = stale_after
        self.web_config = web_config or WebConfig()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a slow or plain-HTTP
        # client cannot hold up accepting the next connection.
        ctx: ssl.SSLContext | None = self.web_config.ssl_context
        if ctx is not None:
            request.settimeout(CLIENT_TIMEOUT)
            request = ctx.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up or fails its handshake costs its own connection, silently."""
