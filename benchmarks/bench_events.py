"""Events out: how fast the relay captures journal rows and delivers CloudEvents over HTTP.

Findings from 50 nodes accepted into a fresh journal, captured into the outbox, then
delivered to a real HTTP/1.1 receiver on loopback (stdlib http.server answering 202), in
each content mode. One relay, one connection, one commit per acknowledged event: the rates
are what a single remediation replica sends.
"""

from __future__ import annotations

import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from remediation.events import capture
from remediation.events.config import EventsConfig
from remediation.events.relay import Relay
from remediation.events.sink import HttpSink
from remediation.journal import Journal
from remediation.model import Alert


class _Accept(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _alert(i: int) -> Alert:
    labels = {"alertname": "GpuXidFatal", "severity": "critical", "node": f"gpu-node-{i % 50:03d}",
              "fault_class": "xid_fatal", "action": "drain", "gpu": str(i % 8)}  # fmt: skip
    return Alert(f"fp{i}", "2026-11-29T10:00:00Z", "firing", labels, {"summary": "x"})


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 1000 if quick else 5000
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/events"
    rows: list[dict[str, Any]] = []
    try:
        for mode in ("structured", "binary"):
            with tempfile.TemporaryDirectory() as d:
                journal = Journal(Path(d) / "state.db")
                capture.prime(journal)
                journal.accept([_alert(i) for i in range(n)], time.time())
                relay = Relay(journal, EventsConfig(url, mode=mode), HttpSink(url))
                t0 = time.perf_counter()
                got = relay.capture()
                t1 = time.perf_counter()
                sent = relay.deliver()
                t2 = time.perf_counter()
                journal.close()
            rows.append({"name": f"capture ({mode})", "value": got / (t1 - t0),
                         "unit": "events/s", "note": f"{got} findings into the outbox"})  # fmt: skip
            rows.append({"name": f"deliver ({mode})", "value": sent / (t2 - t1),
                         "unit": "events/s", "note": f"{sent} acknowledged, loopback"})  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    return rows
