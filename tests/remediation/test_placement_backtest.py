"""`gpuwarden placement backtest`: the tiers replayed on Prometheus history: one episode per
stretch of marginal findings, lasting ttl past the last one, the ttl doubled for a
recurrence within 7 days; read through a (fake, loopback) Prometheus query_range API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from remediation.placement import backtest
from remediation.placement.config import PlacementPolicy

H, D = 3600.0, 86400.0
P = PlacementPolicy()


def test_a_stretch_of_findings_is_one_episode_ending_ttl_after_the_last() -> None:
    [e] = backtest.episodes({"n1": [0.0, 300.0, 600.0]}, P, end=10 * D)
    assert (e.start, e.last_evidence, e.end, e.recurrences) == (0.0, 600.0, 600.0 + D, 0)


def test_a_recurrence_within_seven_days_doubles_the_ttl_and_the_history_end_clips() -> None:
    eps = backtest.episodes({"n1": [0.0, 2 * D, 3 * D + 5 * H]}, P, end=4 * D)
    assert [(e.start, e.ttl_s, e.recurrences) for e in eps] == [(0.0, D, 0), (2 * D, 2 * D, 1)]
    assert eps[1].end == 4 * D  # still de-preferred at the end of the history


def test_durations_parse_like_prometheus() -> None:
    assert backtest.seconds("7d") == 7 * D and backtest.seconds("90s") == 90
    with pytest.raises(Exception, match="duration"):
        backtest.seconds("a week")


@pytest.fixture
def prometheus() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    asked: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            q = parse_qs(urlparse(self.path).query)
            asked.append(q)
            start = float(q["start"][0])
            body = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"node": "gpu-node-007"},
                 "values": [[start + 600 * i, "1"] for i in range(3)]}]}}  # fmt: skip
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    srv.shutdown()


def test_the_backtest_reads_the_marginal_findings_from_prometheus_and_reports(
    prometheus: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = prometheus
    assert backtest.main(["backtest", "--prometheus", url, "--since", "7d", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["node"] == "gpu-node-007" and row["recurrences"] == 0
    assert 'kind="marginal"' in asked[0]["query"][0]
    assert backtest.main(["backtest", "--prometheus", url, "--since", "2d"]) == 0
    out = capsys.readouterr().out
    assert "gpu-node-007" in out and "the placement budget is not replayed" in out
