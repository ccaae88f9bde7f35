"""InfiniBand rules over node_exporter's series, for the dcgm-exporter variant (alerts/dcgm/).

Sits in alerts/ (decides), beside generate_dcgm_rules.py, which loads it. dcgm-exporter serves
no InfiniBand field; a dcgm fleet reads its HCAs with node_exporter's infiniband collector,
which reads the same sysfs files as gpuwarden's exporter (catalog.NODE_IB_*, as the analyzer's
node_exporter dialect reads them). :func:`translate` rewrites a native expression: the port
state and rate map one to one; a counter family selected by ``counter`` becomes one series per
sysfs file, relabelled ``counter=<file>``; every series gets ``node`` from ``instance``'s host
part (node_exporter sets no node label), so the native ``on (node, device, port)`` joins and
the alert text work unchanged, and ``Hostname`` (the same value) beside it, so the dcgm
dashboards, which select every host by dcgm-exporter's host label, find the HCAs too. A counter node_exporter does not serve is dropped from a
selection; a series it has no form of (the HCA model's info) makes the rule untranslatable.
"""

from __future__ import annotations

import re

from dashboards.dcgm_translate import HOST_LABEL, RECORD_PREFIX, Untranslatable
from exporter import catalog as c

# instance "host:9100" -> node "host" (analyzer.sources.dialects.identity.host_of)
NODE_FROM_INSTANCE = '"node", "$1", "instance", "(.+?)(?::[0-9]+)?"'
INSTANT = {
    c.IB_PORT_STATE.name: c.NODE_IB_STATE,
    c.IB_PORT_RATE.name: c.NODE_IB_RATE,
}
DATA = {
    c.IB_TRANSMIT.name: c.NODE_IB_DATA["port_xmit_data"],
    c.IB_RECEIVE.name: c.NODE_IB_DATA["port_rcv_data"],
}
HW = frozenset({"local_ack_timeout_err", "rnr_nak_retry_err"})  # files under hw_counters/
FAMILIES = {
    c.IB_COUNTER.name: {k: v for k, v in c.NODE_IB_ERRORS.items() if k not in HW},
    c.IB_HW_COUNTER.name: {k: v for k, v in c.NODE_IB_ERRORS.items() if k in HW},
}
_COUNTERS = re.compile(rf"\b(\w+)\(\s*({'|'.join(FAMILIES)})(?:\{{([^}}]*)\}})?\[([^\]]+)\]\s*\)")
_SERIES = re.compile(rf"\b({'|'.join([*INSTANT, *DATA])})\b(\[[^\]]+\])?")
_MATCHER = re.compile(r'^\s*counter\s*(=~|=)\s*"([^"]*)"\s*$')


def with_node(expr: str, host: str = HOST_LABEL) -> str:
    """``node`` from ``instance``, and the GPU exporter's host label (dcgm's by default)
    from ``node``."""
    return (
        f'label_replace(label_replace({expr}, {NODE_FROM_INSTANCE}), "{host}", "$1", "node",'
        ' "(.*)")'
    )


def _counters(m: re.Match[str], host: str) -> str:
    fn, family, matchers, window = m[1], FAMILIES[m[2]], m[3] or "", m[4]
    files = list(family)
    if matchers:
        sel = _MATCHER.match(matchers)
        if not sel:
            raise Untranslatable(f"unsupported matchers {matchers!r} on {m[2]}")
        files = [f for f in files if re.fullmatch(sel[2], f)]
    if not files:
        raise Untranslatable(f"node_exporter serves none of {m[2]}{{{matchers}}}")
    parts = [
        with_node(f'label_replace({fn}({family[f]}[{window}]), "counter", "{f}", "", "")', host)
        for f in files
    ]
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _series(m: re.Match[str], host: str) -> str:
    name = INSTANT.get(m[1]) or DATA[m[1]]
    if m[2]:  # a range: the caller's function applies to it; node is added around that
        raise Untranslatable(f"{m[1]} is read as a range outside a counter function")
    return with_node(name, host)


def _rates(expr: str, host: str) -> str:
    """``rate(<data counter>[w])`` -> node_exporter's byte counter, node added outside."""
    pattern = rf"\b(\w+)\(\s*({'|'.join(DATA)})\[([^\]]+)\]\s*\)"
    return re.sub(pattern, lambda m: with_node(f"{m[1]}({DATA[m[2]]}[{m[3]}])", host), expr)


def translate(
    expr: str, produced: set[str], host: str = HOST_LABEL, record_prefix: str = RECORD_PREFIX
) -> str:
    """``expr`` (a native InfiniBand rule's) over node_exporter's series; ``host``: the GPU
    exporter's host label the series get beside ``node``, ``record_prefix``: the variant's."""
    for rec in re.findall(r"\bgpuwarden:[a-z0-9_:]+", expr):
        if rec not in produced:
            raise Untranslatable(f"{rec} is not recorded from node_exporter's series")
    out = _COUNTERS.sub(lambda m: _counters(m, host), expr)
    out = _rates(out, host)
    out = _SERIES.sub(lambda m: _series(m, host), out)
    left = re.findall(r"\bgpuwarden_[a-z0-9_]+", out)
    if left:
        raise Untranslatable(f"{left[0]} has no node_exporter series")
    return out.replace("gpuwarden:", record_prefix)
