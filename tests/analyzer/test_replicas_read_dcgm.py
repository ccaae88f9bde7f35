"""A replica reads only its own nodes on dcgm-exporter telemetry too (issue 33): dcgm-exporter's
and node_exporter's families, whose ``node`` exists only after relabelling, are narrowed on
the server by the labels the node is derived from (``Hostname``, ``instance``), while the
topology that tells a replica what it owns still sees the whole fleet. Through a real
Prometheus backfilled with a simulated fleet recorded as dcgm-exporter + node_exporter serve
it (tests/analyzer/dcgmfleet.py)."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request

import numpy as np
import pytest

from analyzer.replicas.slicing import subwindow
from analyzer.sources.dialects.identity import NodeMap, identity_matchers
from exporter import catalog as c

from . import dcgmfleet
from .dcgmfleet import STEP
from .replicaread import reads, same_window, series_hosts, single_and_replicas


def _faults(f):
    f.inject("xid", f.nodes[0], "gpu3", {"xid": 95}, onset=500)
    f.inject("nvlink_errors", f.nodes[1], "gpu2/4", onset=500)  # a moved-only dcgm counter
    f.inject("gpu_fallen_off_bus", f.nodes[2], "gpu5", onset=600)
    f.inject("ib_port_down", f.nodes[3], "mlx5_1/1", onset=500)  # node_exporter's port


@pytest.fixture(scope="module")
def dcgm_fleet(tmp_path_factory):
    with dcgmfleet.served(tmp_path_factory.mktemp("dcgm-replicas"), 4, _faults) as got:
        yield got


def _series_reads(calls) -> list[tuple[str, bytes]]:
    """The reads of series, past discovery and the topology (instant queries by node/host)."""
    out = []
    for _, form, body in calls:
        q = form["query"]
        if "__name__" in q or "unless on (node)" in q or q.startswith(("group by (node",
                                                                        "count by (node")):  # fmt: skip
            continue
        out.append((q, body))
    return out


@pytest.mark.real
def test_a_replica_reads_only_the_dcgm_and_node_exporter_series_of_its_hosts(dcgm_fleet):
    url, fleet, end = dcgm_fleet
    at, me = end + 5, fleet.nodes[0]
    ((full, _, full_bytes, _),) = reads(url, [(at, None)], STEP, discover=True)
    ((mine, calls, mine_bytes, topo),) = reads(url, [(at, {me})], STEP, discover=True)
    assert topo.nodes == tuple(fleet.nodes)  # the topology still sees the whole fleet
    assert topo.jobs == full.jobs and topo.jobs
    assert mine.nodes == (me,)
    read = _series_reads(calls)
    assert any(q.startswith("max by (node,Hostname") for q, _ in read)  # dcgm's families
    assert any("node_infiniband" in q for q, _ in read)  # and node_exporter's
    for query, _ in read:  # by the one label the topology saw each exporter's hosts named by
        if "DCGM_" in query:
            assert "Hostname=" in query and not re.search(r'\b(hostname|node)=~"', query), query
        if "node_infiniband" in query:
            assert "instance=" in query and not re.search(r'\b(Hostname|node)=~"', query), query
    named: set[str] = set()
    for query, body in read:  # every series read names the owned host, and only it
        assert me in query, query
        hosts = series_hosts(body)
        assert hosts <= {me}, query
        named |= hosts
    assert named == {me}
    same_window(mine, subwindow(full, [0]))
    assert mine.dialect_of == {0: full.dialect_of[0]}
    assert (0, 3, 95) in {(e.node, e.gpu, e.xid) for e in mine.xids}  # the last-XID gauge
    assert mine_bytes < full_bytes / 2


@pytest.mark.real
def test_a_dcgm_host_handed_over_between_cycles_is_read_over_its_whole_window(dcgm_fleet):
    url, fleet, end = dcgm_fleet
    a, b = fleet.nodes[0], fleet.nodes[1]
    before, at, later = end - 4 * STEP + 5, end - 2 * STEP + 5, end + 5
    cycles = reads(url, [(before, {a}), (at, {a, b}), (later, {b})], STEP, discover=True)
    (w0, _, _, _), (w1, calls1, _, _), (w2, _, _, _) = cycles
    ((full1, _, _, _),) = reads(url, [(at, None)], STEP, discover=True)
    ((full2, _, _, _),) = reads(url, [(later, None)], STEP, discover=True)
    assert w0.nodes == (a,)
    # b joined at `at`: its whole window, its NVLink errors that began before it was owned too
    same_window(w1, subwindow(full1, [0, 1]))
    errors = w1.metrics[c.NVLINK_ERRORS.name][:, 1, 2]  # (time, link, type) of b's GPU 2
    assert np.nanmax(errors) > np.nanmin(errors)  # b's moved counter, read whole
    starts = {float(form["start"]) for _, form, _ in calls1
              if "start" in form and b in form["query"] and "DCGM_" in form["query"]}  # fmt: skip
    assert starts and min(starts) <= at - 5 - 600  # read from the window's start
    # a given away at `later`: gone; b read incrementally and still whole
    same_window(w2, subwindow(full2, [1]))


@pytest.mark.real
def test_a_node_map_of_names_selects_by_the_hosts_the_nodes_are_mapped_from(dcgm_fleet):
    url, fleet, end = dcgm_fleet
    at = end + 5
    renamed = NodeMap("", {h: f"n{i}" for i, h in enumerate(fleet.nodes)})
    ((full, _, _, _),) = reads(url, [(at, None)], STEP, discover=True, node_map=renamed)
    ((mine, calls, _, _),) = reads(url, [(at, {"n2"})], STEP, discover=True, node_map=renamed)
    assert mine.nodes == ("n2",)
    for query, body in _series_reads(calls):  # selected by the host the node is mapped from
        assert series_hosts(body) <= {fleet.nodes[2]}, query
    same_window(mine, subwindow(full, [2]))


def _hosts_read(calls) -> set[str]:
    return set().union(*(series_hosts(body) for _, body in _series_reads(calls)))


@pytest.mark.real
def test_a_node_pattern_selects_by_the_pattern_around_the_owned_nodes(dcgm_fleet):
    url, fleet, end = dcgm_fleet
    at = end + 5
    pattern = NodeMap(r"^gpu-node-(\d+)$", {})
    ((full, _, full_bytes, _),) = reads(url, [(at, None)], STEP, discover=True, node_map=pattern)
    ((mine, calls, mine_bytes, _),) = reads(url, [(at, {"003"})], STEP, discover=True,
                                            node_map=pattern)  # fmt: skip
    assert mine.nodes == ("003",)
    read = _series_reads(calls)
    assert any("DCGM_" in q for q, _ in read) and any("node_infiniband" in q for q, _ in read)
    # the pattern around the node, on the label each exporter names (a moved row: its labels)
    assert any('Hostname=~"003|gpu-node-(?:003)"' in q for q, _ in read)
    assert any('instance=~"(?:003|gpu-node-(?:003))' in q for q, _ in read)
    for query, body in read:
        assert "gpu-node-(?:003)" in query or fleet.nodes[2] in query or '"003"' in query, query
        assert series_hosts(body) <= {fleet.nodes[2]}, query
    assert _hosts_read(calls) == {fleet.nodes[2]}
    same_window(mine, subwindow(full, [2]))  # exactly what the single read finds of it
    assert mine_bytes < full_bytes / 2
    # a pattern not proven to select a superset (\b: Python's, not RE2's) is read whole and
    # narrowed in memory: the same part, at the whole family's bytes
    unproven = NodeMap(r"gpu-node-(\d+)\b", {})
    assert not unproven.selectable
    ((whole, calls, whole_bytes, _),) = reads(url, [(at, {"003"})], STEP, discover=True,
                                              node_map=unproven)  # fmt: skip
    assert whole.nodes == ("003",) and _hosts_read(calls) == set(fleet.nodes)
    same_window(whole, subwindow(full, [2]))
    assert whole_bytes > 2 * mine_bytes


@pytest.mark.real
def test_under_a_node_pattern_a_host_handed_over_is_read_whole_and_one_given_away_forgotten(
    dcgm_fleet,
):
    url, fleet, end = dcgm_fleet
    pattern = NodeMap(r"gpu-node-(\d+)", {})
    before, at, later = end - 4 * STEP + 5, end - 2 * STEP + 5, end + 5
    plan = [(before, {"001"}), (at, {"001", "002"}), (later, {"002"})]
    cycles = reads(url, plan, STEP, discover=True, node_map=pattern)
    for (w, calls, _, _), (t, own) in zip(cycles, plan, strict=True):
        ((full, _, _, _),) = reads(url, [(t, None)], STEP, discover=True, node_map=pattern)
        same_window(w, subwindow(full, [int(n) - 1 for n in sorted(own)]))
        assert _hosts_read(calls) <= {fleet.nodes[int(n) - 1] for n in own}  # on the server


# patterns and host names each selected by Python's reading of the pattern; non-ASCII digits and
# letters where Python's classes and RE2's differ
_RE2_CASES = [
    (r"gpu-node-(\d+)", ["gpu-node-003", "gpu-node-\u0663"]),
    (r"^(\w+)\.example\.com$", ["a_1.example.com", "\u00e9t\u00e9.example.com", "x.example.com"]),
    (r"(?:rack\d+-)?(gpu-\d{2,4})(?:\.ib)?", ["rack12-gpu-07.ib", "gpu-0001", "rack\u0661-gpu-99"]),
    (r"[^.]+\.(\S+)", ["a.b.c", "\u00e9.xy", "z.\u00e9"]),
    (r"(?x) h - ( [a-f0-9]+ ) \s? # comment", ["h-ff", "h-0a\t", "h-1\u2003"]),
    (r"(.*?)-(.*)", ["a-b-c", "-x", "\u00e9-x"]),
    (r'(\d+)"\\q', ['7"\\q', '\u0664"\\q']),
    (r"(?s)n(.)x.", ["n\nx\n", "nax\u00e9"]),
]


def _re2_selects(url: str, matcher: str, host: str) -> bool:
    """Whether Prometheus' RE2 matches ``host`` by the ``label=~"..."`` matcher's regex: its
    label_replace sets ``m`` only where the regex matches the label in full, as a matcher."""
    value = matcher.split("=~", 1)[1]  # a PromQL string already
    h = json.dumps(host)  # a PromQL string too (a JSON string is one)
    query = f'label_replace(label_replace(vector(1), "h", {h}, "", ""), "m", "y", "h", {value})'
    form = urllib.parse.urlencode({"query": query}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", form) as r:
        got = json.load(r)
    assert got["status"] == "success", (query, got)
    return got["data"]["result"][0]["metric"].get("m") == "y"


@pytest.mark.real
@pytest.mark.parametrize(("pattern", "hosts"), _RE2_CASES, ids=lambda x: str(x)[:24])
def test_prometheus_re2_selects_exactly_the_hosts_python_reads_the_selection_to_select(
    dcgm_fleet, pattern, hosts
):
    url, _, _ = dcgm_fleet
    nm = NodeMap(pattern, {})
    for host in hosts:
        assert re.fullmatch(pattern, host), host  # a host the pattern maps to a node
        owned = {nm(host)}
        matcher, instance = identity_matchers(("Hostname", "instance"), owned, nm) or ["", ""]
        rx = re.compile(nm.raw_regex(owned) or "")
        assert _re2_selects(url, matcher, host), (pattern, host, matcher)
        assert _re2_selects(url, instance, host + ":9100"), (pattern, host, instance)
        for near in (host + "x", "x" + host, host[:-1], host + "\u00e9"):  # RE2 as Python
            assert _re2_selects(url, matcher, near) == bool(rx.fullmatch(near)), (matcher, near)


@pytest.mark.real
def test_replicas_on_dcgm_telemetry_find_what_one_analyzer_finds(dcgm_fleet):
    url, fleet, end = dcgm_fleet
    members = ("replica-a", "replica-b", "replica-c")
    (single, nodes), replicas = single_and_replicas(url, end, STEP, members, discover=True)
    assert nodes == tuple(fleet.nodes)
    kinds = {k for _, _, k in single}
    assert {"xid_fatal", "gpu_lost", "nvlink_errors", "ib_port_down"} <= kinds
    got: set[tuple[str, str, str]] = set()
    read: list[str] = []
    for _, found, nodes in replicas:
        assert not got & found  # never found twice
        got |= found
        read += nodes
    assert sorted(read) == sorted(fleet.nodes)  # each host read by exactly one replica
    assert got == single
