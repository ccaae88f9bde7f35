"""The fleet topology as the leader leaves it for the other replicas (issue 33): one blob a
cycle, what :meth:`analyzer.sources.prometheus.PrometheusSource._topology` derives.

Pure. :func:`encode` writes the cycle, the evaluation grid and the topology window's fields
(nodes, jobs, NVLink domains, leaves, and per foreign exporter the labels its hosts were named
by) as JSON, floats as Python's shortest round-trip repr so the grid reads back bit for bit,
zlib compressed. :func:`decode` gives back an equal :class:`~analyzer.sources.topology.Topology`
or raises ValueError naming what is wrong: a follower then reads the topology itself, never
judges on a half-read one.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import numpy as np

from analyzer.sources.topology import Topology
from analyzer.window import Window

VERSION = 1


def encode(cycle: int, topology: Topology) -> bytes:
    w = topology.window
    doc = {
        "version": VERSION,
        "cycle": cycle,
        "t": [float(x) for x in w.t],
        "step": float(w.step),
        "nodes": list(w.nodes),
        "jobs": {j: list(m) for j, m in w.jobs.items()},
        "leaf_of": sorted(w.leaf_of.items()),
        "nvlink_domain_of": sorted(w.nvlink_domain_of.items()),
        "host_labels": {d: sorted(v) for d, v in topology.host_labels.items()},
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode())


def decode(blob: bytes) -> tuple[int, Topology]:
    """The cycle and topology of :func:`encode`; ValueError naming what is wrong otherwise."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"shared topology: not a compressed JSON document ({e})") from None
    try:
        return _topology(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"shared topology: malformed document ({e!r})") from None


def _topology(doc: Any) -> tuple[int, Topology]:
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ValueError("not a version 1 topology")
    cycle = _int(doc["cycle"])
    nodes = tuple(_str(n) for n in _list(doc["nodes"]))
    if len(set(nodes)) != len(nodes) or list(nodes) != sorted(nodes):
        raise ValueError("nodes are not sorted and distinct")
    t = np.array([_float(x) for x in _list(doc["t"])], dtype=float)
    if not len(t):
        raise ValueError("no evaluation grid")
    n = len(nodes)
    window = Window(
        t=t,
        nodes=nodes,
        metrics={},
        step=_float(doc["step"]),
        jobs={_str(j): tuple(_index(i, n) for i in _list(m)) for j, m in _dict(doc["jobs"])},
        leaf_of=_of(doc["leaf_of"], n),
        nvlink_domain_of=_of(doc["nvlink_domain_of"], n),
    )
    labels = {_str(d): frozenset(_str(x) for x in _list(v)) for d, v in _dict(doc["host_labels"])}
    return cycle, Topology(window, labels)


def _of(pairs: Any, n: int) -> dict[int, str]:
    out = {}
    for i, name in _list(pairs):
        out[_index(i, n)] = _str(name)
    return out


def _list(x: Any) -> list[Any]:
    if not isinstance(x, list):
        raise TypeError(f"{x!r} is not a list")
    return x


def _dict(x: Any) -> list[tuple[Any, Any]]:
    if not isinstance(x, dict):
        raise TypeError(f"{x!r} is not a mapping")
    return list(x.items())


def _index(i: Any, n: int) -> int:
    if not 0 <= _int(i) < n:
        raise ValueError(f"node index {i} outside 0..{n - 1}")
    return int(i)


def _int(x: Any) -> int:
    if type(x) is not int:
        raise TypeError(f"{x!r} is not an integer")
    return x


def _float(x: Any) -> float:
    if type(x) not in (int, float):
        raise TypeError(f"{x!r} is not a number")
    return float(x)


def _str(x: Any) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{x!r} is not a string")
    return x
