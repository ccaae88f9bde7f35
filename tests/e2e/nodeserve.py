"""Serving simulated nodes' metrics to a real Prometheus in the e2e tests: one loopback HTTP
server answering ``/nodes/<node>/metrics`` and the scrape configuration that reads it (one
job per node, so each node is its own target)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from simulator.simulator import Simulator


@contextlib.contextmanager
def serve_nodes(body: Callable[[str], bytes | None]) -> Iterator[str]:
    """``body(node)``: the node's exposition (None: 404). Calls are serialized (the
    simulator is not thread-safe). Yields the ``host:port`` to scrape."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            node = self.path.removeprefix("/nodes/").removesuffix("/metrics")
            with lock:
                out = body(node)
            if out is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def scrape_config(address: str, nodes: Sequence[str], rule_files: Sequence[str] = ()) -> str:
    """2 s scrapes of every node, 1 s rule evaluation, the given rule files."""
    jobs = "\n".join(
        f"  - job_name: {n}\n    metrics_path: /nodes/{n}/metrics\n"
        f"    static_configs: [{{targets: ['{address}']}}]"
        for n in nodes
    )
    rules = f"rule_files: [{', '.join(rule_files)}]\n" if rule_files else ""
    return (
        "global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}\n"
        f"{rules}scrape_configs:\n{jobs}\n"
    )


@contextlib.contextmanager
def serve_simulator(sim: Simulator) -> Iterator[str]:
    """The simulator's nodes, as ``gpuwarden simulate`` serves them (unknown node: 404)."""
    with serve_nodes(lambda n: sim.metrics(n) if n in sim.fleet.nodes else None) as address:
        yield address
