"""A real CloudEvents receiver on loopback for the events-out tests (stdlib http.server).

It decodes what arrives by the HTTP protocol binding of CloudEvents 1.0 (binary mode:
``ce-`` headers, percent-decoded, ``Content-Type`` as ``datacontenttype``; structured mode:
``application/cloudevents+json``), checks the required attributes, and records every
delivery with the status it answered. It can be told to fail (5xx) with a seeded
probability, or be stopped and started again on the same port (a receiver restart).
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REQUIRED = ("id", "source", "specversion", "type")


@dataclass
class Delivery:
    event: dict[str, Any]
    mode: str
    status: int
    problems: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    at: float = 0.0  # monotonic time the request arrived


def decode(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], str, list[str]]:
    """(event, mode, problems) from one HTTP request, the way a conforming receiver reads it."""
    ctype = headers.get("content-type", "")
    problems: list[str] = []
    if b'"resourceLogs"' in body[:40]:  # an OTLP/HTTP JSON logs request (--events-mode otlp)
        return otlp_event(json.loads(body))
    if ctype.startswith("application/cloudevents+json"):
        event = json.loads(body.decode("utf-8"))
        mode = "structured"
    else:
        mode = "binary"
        event = {}
        for name, value in headers.items():
            if name.startswith("ce-"):
                try:  # one round of percent-decoding; invalid UTF-8 rejected
                    event[name[3:]] = urllib.parse.unquote(value, errors="strict")
                except UnicodeDecodeError:
                    problems.append(f"{name}: invalid UTF-8 after percent-decoding")
        if "ce-datacontenttype" in headers:
            problems.append("binary mode: ce-datacontenttype must not be present")
        event["datacontenttype"] = ctype
        event["data"] = json.loads(body) if body else None
    for a in REQUIRED:
        if not event.get(a):
            problems.append(f"{a}: missing")
    if event.get("specversion") != "1.0":
        problems.append(f"specversion {event.get('specversion')!r}")
    return event, mode, problems


def otlp_event(request: dict[str, Any]) -> tuple[dict[str, Any], str, list[str]]:
    """The event one OTLP log record carries: its cloudevents.* attributes, body as data."""
    problems: list[str] = []
    records = [r for rl in request.get("resourceLogs", []) for sl in rl.get("scopeLogs", [])
               for r in sl.get("logRecords", [])]  # fmt: skip
    if len(records) != 1:
        return {}, "otlp", [f"{len(records)} log records, want 1"]
    rec = records[0]
    attrs = {a["key"]: a["value"].get("stringValue") for a in rec.get("attributes", [])}
    event: dict[str, Any] = {
        "id": attrs.get("cloudevents.event_id"), "source": attrs.get("cloudevents.event_source"),
        "specversion": attrs.get("cloudevents.event_spec_version"),
        "type": attrs.get("cloudevents.event_type"), "partitionkey": attrs.get("gpuwarden.node"),
        "sequence": attrs.get("gpuwarden.sequence"), "data": rec.get("body"),
    }  # fmt: skip
    for field_ in ("timeUnixNano", "observedTimeUnixNano"):
        if not str(rec.get(field_, "")).isdigit():
            problems.append(f"{field_}: not a decimal string")
    for a in REQUIRED:
        if not event.get(a):
            problems.append(f"{a}: missing")
    return event, "otlp", problems


class Receiver:
    def __init__(
        self, port: int = 0, fail_rate: float = 0.0, seed: int = 1, delay_s: float = 0.0
    ) -> None:
        self.delay_s = delay_s  # think time before each answer (a busy receiver)
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        self.fail_rate, self.rng = fail_rate, random.Random(seed)
        self.status_for: dict[str, int] = {}  # event id -> status to answer (a poison event)
        self.server: ThreadingHTTPServer | None = None
        self.conns: set[Any] = set()  # open client connections (closed by a stop)
        self.in_flight = 0  # requests being answered now
        self.port = port
        self.start()

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with receiver.lock:
                    receiver.conns.add(self.connection)

            def finish(self) -> None:
                with receiver.lock:
                    receiver.conns.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                with receiver.lock:
                    receiver.in_flight += 1
                try:
                    self._post()
                finally:
                    with receiver.lock:
                        receiver.in_flight -= 1

            def _post(self) -> None:
                arrived = time.monotonic()
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                event, mode, problems = decode(hdrs, body)
                with receiver.lock:
                    status = receiver.status_for.get(str(event.get("id")), 0)
                    if not status:
                        status = 503 if receiver.rng.random() < receiver.fail_rate else 202
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.wfile.flush()  # answered: only now is it a delivery the sender may see
                with receiver.lock:
                    receiver.deliveries.append(
                        Delivery(event, mode, status, problems, hdrs, arrived)
                    )

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a sender killed mid-request: its connection resets, nothing to print

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        with self.lock:  # a stopped receiver keeps no kept-alive connection serving
            for c in list(self.conns):
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
            self.conns.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def settled(self, timeout: float = 5.0) -> list[Delivery]:
        """Every delivery answered so far, once no request is half-answered."""
        end = time.monotonic() + timeout
        while True:
            with self.lock:
                if self.in_flight == 0 or time.monotonic() > end:
                    return list(self.deliveries)
            time.sleep(0.005)

    def acked(self) -> list[dict[str, Any]]:
        """Events answered 2xx, in arrival order."""
        return [d.event for d in self.settled() if 200 <= d.status < 300]
