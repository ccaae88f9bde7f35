"""Narrowing a foreign dialect's read to some nodes (issue 33), without a server: matchers on the
labels a foreign series names its host in, added to every series selector of a dialect's
PromQL (the real-Prometheus path: test_replicas_read_dcgm.py)."""

from __future__ import annotations

import re

import pytest

from analyzer.sources.dialects import amd, dcgm, node_exporter
from analyzer.sources.dialects.identity import NodeMap, host_of, identity_matchers
from analyzer.sources.queries import over_time, with_matchers
from analyzer.sources.topology import (
    PRESENCE,
    foreign_host_queries,
    foreign_jobs_expr,
    foreign_nodes_expr,
)
from exporter import catalog as c

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENT = re.compile(r"[a-zA-Z_:][\w:]*")
_MARK = 'Hostname=~"h"'


def _dialect_queries():
    return (*dcgm.queries(), *amd.queries(), *node_exporter.queries())


def _names(expr: str) -> set[str]:
    """The foreign metric names an expression reads (outside its strings)."""
    words = set(_IDENT.findall(_STRING.sub("", expr)))
    return {w for w in words if w.startswith(("DCGM_", "node_")) or amd.split(w) is not None}


@pytest.mark.parametrize("q", _dialect_queries(), ids=lambda q: q.name)
def test_every_series_selector_of_a_dialect_query_gets_the_host_matchers(q):
    out = q.expr(_MARK)
    names = _names(q.source)
    assert names, q.source
    bare = _STRING.sub(lambda m: " " * len(m.group()), out)  # names in strings: not series
    for name in names:  # each occurrence is narrowed, not just the first
        at = [m.end() for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])", bare)]
        assert at and all(out.startswith("{" + _MARK, i) for i in at), (name, out)
    # strings (label_replace's arguments) keep the field names as they were
    assert [x for x in _STRING.findall(out) if x != '"h"'] == _STRING.findall(q.source)


def test_grouping_labels_functions_and_keywords_are_not_taken_for_series():
    expr = 'max by (gpu, Hostname) (X{a="1"}) or on (gpu) group_left Y > bool 0 offset 5m'
    assert with_matchers(expr, 'h="x"') == (
        'max by (gpu, Hostname) (X{h="x",a="1"}) or on (gpu) group_left Y{h="x"} > bool 0 offset 5m'
    )
    assert with_matchers('{__name__=~"a|b"}', 'h="x"') == '{h="x",__name__=~"a|b"}'
    assert with_matchers("increase(V[90s]) > 0", 'h="x"') == 'increase(V{h="x"}[90s]) > 0'


def test_a_presence_expression_is_read_over_a_window_and_a_ranged_one_is_refused():
    assert over_time("X * 0 + 1", "last_over_time", 700) == "last_over_time(X[700s]) * 0 + 1"
    with pytest.raises(ValueError, match="over a range already"):
        over_time("increase(V[90s]) > 0", "last_over_time", 700)


def test_the_foreign_topology_reads_every_presence_and_allocation_family_of_each_dialect():
    for q in _dialect_queries():
        if q.metric in PRESENCE:
            expr = foreign_nodes_expr(q, 700)
            assert expr.startswith("group by (node,Hostname,hostname") and "[700s]" in expr
            assert "gpu" not in expr.split(")")[0]  # one row per host, not per GPU
        if q.metric is c.GPU_ALLOCATION_INFO:
            by = foreign_jobs_expr(q).split("(")[1].split(")")[0].split(",")
            assert {"gpu", "gpu_id"}.isdisjoint(by) and by[:3] == ["node", "Hostname", "hostname"]


def test_hosts_are_learnt_from_presence_families_or_from_every_plain_one_of_an_exporter_without():
    qs = _dialect_queries()
    got = foreign_host_queries(qs)
    assert got and all(q.metric in PRESENCE for q in got)
    assert {q.dialect for q in got} == {"dcgm-exporter", "amd-dme", "node_exporter"}
    pfc_only = node_exporter.ethtool_queries()  # node_exporter serving only ethtool's PFC
    assert foreign_host_queries(pfc_only) == list(pfc_only)
    assert "[700s]" in foreign_nodes_expr(pfc_only[0], 700)


def _regex(matcher: str) -> re.Pattern[str]:
    """A ``label=~"..."`` matcher's regex as Prometheus compiles it (anchored)."""
    value = matcher.split("=~", 1)[1][1:-1].replace("\\\\", "\\")
    return re.compile(f"^(?:{value})$")


def test_host_matchers_select_each_identity_label_the_query_keeps_and_instance_with_a_port():
    got = identity_matchers(("node", "Hostname", "instance", "gpu"), {"gpu-1.x", "gpu-2"})
    assert got is not None and [m.split("=~")[0] for m in got] == ["node", "Hostname", "instance"]
    hostname, instance = _regex(got[1]), _regex(got[2])
    assert hostname.match("gpu-1.x") and not hostname.match("gpu-1xx")  # literals, not regex
    for inst in ("gpu-2:9400", "gpu-1.x", "[gpu-2]:9100"):
        assert instance.match(inst) and host_of(inst) in {"gpu-1.x", "gpu-2"}, inst
    for inst in ("gpu-22:9400", "gpu-2:abc", "xgpu-2"):
        assert not instance.match(inst), inst


def test_a_node_map_of_names_is_inverted_and_a_pattern_is_selected_around_the_nodes():
    m = NodeMap("", {"host-a": "n1", "n2": "elsewhere"})
    # a node's own name passes through unmapped, unless it is a host of another node (n2)
    assert m.raw_names({"n1", "n2", "n3"}) == {"host-a", "n1", "n3"}
    assert identity_matchers(("Hostname",), {"n1"}, m) == ['Hostname=~"host-a|n1"']
    got = identity_matchers(("Hostname",), {"n1"}, NodeMap(r"gpu-(\d+)", {}))
    assert got == ['Hostname=~"n1|gpu-(?:n1)"']  # a pattern has no inverse list: a regex
    assert not NodeMap(r"gpu-(\d+)", {}).invertible and m.invertible
    assert identity_matchers(("Hostname",), {"n1"}, NodeMap(r"(gpu)+-(\d+)", {})) is None
