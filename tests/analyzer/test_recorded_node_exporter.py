"""The node_exporter dialect against the real node_exporter's output (issue 23).

The Debian binary (node_exporter 1.5.0) runs its infiniband collector alone over the sysfs
fixture tree (fixtures/sys) and is scraped over loopback; the analyzer's node_exporter queries
are answered from that text as Prometheus would answer them (tests/analyzer/scrapeeval.py).
Expected values are the fixture's sysfs files, read by hand (the comment says which).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from analyzer.sources.dialects import NODE_EXPORTER, coverage, node_exporter
from analyzer.window import Window
from exporter import catalog as c
from tests.realcomp import free_port, http_get, require_binary, wait_until

from . import scrapeeval as se

SYS = Path(__file__).resolve().parents[2] / "fixtures" / "sys"
HW = ("local_ack_timeout_err", "rnr_nak_retry_err")  # the judged files under hw_counters/


@contextlib.contextmanager
def _node_exporter() -> Iterator[str]:
    path = require_binary("prometheus-node-exporter")
    port = free_port()
    args = [f"--path.sysfs={SYS}", "--collector.disable-defaults", "--collector.infiniband",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen([path, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: http_get(url, 1.0), 20, 0.05, "node_exporter serving")
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        proc.kill()


@pytest.fixture(scope="module")
def scraped(prom_generation: str) -> tuple[list[se.Sample], list[se.Answer], str]:
    """One scrape per node_exporter generation (1.11 current, 1.5 stable; tests/realcomp.py)."""
    with _node_exporter() as url:
        text = http_get(url).decode()
    instance = url.split("/")[2]  # the scrape target Prometheus would label the series with
    data = se.samples(text, instance=instance)
    return data, se.answers(node_exporter.queries(present=se.names(data)), data), text


def _by_port(answers: list[se.Answer], metric: c.MetricDef, counter: str = "") -> dict:
    return {(a.labels["device"], a.labels["port"]): a.value for a in answers
            if a.metric == metric.name and a.labels.get("counter", "") == counter}  # fmt: skip


@pytest.mark.real
def test_port_state_and_rate_read_as_the_catalogues_numbering_and_bytes_per_second(scraped):
    _, got, _ = scraped
    # ports/*/state "4: ACTIVE", "1: DOWN", "4: ACTIVE"
    assert _by_port(got, c.IB_PORT_STATE) == {("mlx5_0", "1"): 4.0, ("mlx5_0", "2"): 1.0,
                                              ("mlx5_1", "1"): 4.0}  # fmt: skip
    # ports/*/rate "400 Gb/sec (4X NDR)", "10 Gb/sec (4X)", "100 Gb/sec (2X HDR)"
    assert _by_port(got, c.IB_PORT_RATE) == {("mlx5_0", "1"): 5e10, ("mlx5_0", "2"): 1.25e9,
                                             ("mlx5_1", "1"): 1.25e10}  # fmt: skip


@pytest.mark.real
def test_each_error_counter_reads_as_its_sysfs_file_on_the_node_of_the_scrape_target(scraped):
    _, got, _ = scraped
    assert {a.labels["node"] for a in got} == {"127.0.0.1"}  # instance's host: no node label
    # counters/<file> of mlx5_0 port 1 and port 2 (port 2 lacks the last two files)
    want = {"symbol_error": (417, 65535), "link_error_recovery": (2, 0),
            "port_rcv_errors": (3, 0), "port_xmit_discards": (12, 0), "link_downed": (1, 7),
            "local_link_integrity_errors": (0, None),
            "excessive_buffer_overrun_errors": (0, None)}  # fmt: skip
    for counter, (p1, p2) in want.items():
        got_ports = _by_port(got, c.IB_COUNTER, counter)
        assert got_ports.get(("mlx5_0", "1")) == p1, counter
        assert got_ports.get(("mlx5_0", "2")) == p2, counter
    assert _by_port(got, c.IB_COUNTER, "port_xmit_discards")[("mlx5_1", "1")] == 0


@pytest.mark.real
def test_node_exporter_serves_the_hw_counters_from_1_11_on_and_the_reader_asks_for_what_it_serves(
    scraped, prom_generation
):
    data, got, text = scraped
    assert (
        SYS / "class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err"
    ).read_text().strip() == "4"
    asked = {q.source for q in node_exporter.queries(present=se.names(data))}
    plain = {n for f, n in c.NODE_IB_ERRORS.items() if f not in HW}
    if prom_generation == "stable":  # node_exporter 1.5: the tree has them, it leaves them out
        for f in HW:
            assert c.NODE_IB_ERRORS[f] not in text
            assert not _by_port(got, c.IB_COUNTER, f)
        assert asked == {c.NODE_IB_STATE, c.NODE_IB_RATE} | plain
    else:  # node_exporter 1.11 reads hw_counters/
        assert f'{c.NODE_IB_ERRORS["local_ack_timeout_err"]}{{device="mlx5_0",port="1"}} 4' in text
        assert c.NODE_IB_ERRORS["rnr_nak_retry_err"] in text
        assert {c.NODE_IB_ERRORS[f] for f in HW} | plain <= asked


def _ib_window(counters: tuple[str, ...]) -> Window:
    T = 3
    return Window(t=np.arange(T) * 15.0, nodes=("a",), metrics={},
                  ib_counters={k: np.zeros((T, 1, 2)) for k in counters},
                  dialect_of={0: NODE_EXPORTER})  # fmt: skip


def _ib_notes(w: Window) -> list[str]:
    g = coverage.report(w)["groups"][0]
    return next(d for d in g["detectors"] if d["detector"] == "infiniband")["notes"]


def test_coverage_names_the_ib_counters_an_older_node_exporter_does_not_serve():
    served = tuple(f for f in c.IB_ERROR_COUNTERS if f not in HW)  # what 1.5.0 serves
    notes = _ib_notes(_ib_window(served))
    assert len(notes) == 1 and all(f in notes[0] for f in HW) and "v1.11.0" in notes[0]
    assert _ib_notes(_ib_window(c.IB_ERROR_COUNTERS)) == []  # 1.11.0: nothing to say
