"""Where replicas leave their marginal scores for each other, once a cycle (the second step of
:mod:`analyzer.replicas.judge`'s fleet-wide comparisons; the scores carry the pools of the
like-with-like medians and fleet-wide counts too, :mod:`analyzer.pools`).

Edge of the sharded analyzer. A replica :meth:`~Exchange.put`\\ s its part's
:class:`~analyzer.detectors.marginal.Scores` for cycle ``k`` (:func:`encode`: JSON, floats
written as Python's shortest round-trip repr so the values read back bit for bit, zlib
compressed), then reads the others' for ``k`` until every member of the plan has put or its
wait runs out. The same backends are the :class:`~analyzer.replicas.sharing.TopologyBoard`
where the leader leaves the fleet topology it read for ``k`` (``put_topology``, one blob a
cycle), and the :class:`MemoryBoard` where each replica leaves, after judging ``k``, what its
detectors remember of its nodes (``put_memory``: the next owner of a moved node adopts it,
:mod:`analyzer.replicas.handover`). Backends: :class:`DirectoryExchange` (the bare-metal meeting directory,
``scores/<cycle>/<replica>``, ``memory/<cycle>/<replica>`` and ``topology/<cycle>``, each file written whole and renamed
into place),
:class:`analyzer.replicas.configmaps.ConfigMapExchange` (Kubernetes: a ConfigMap per
replica; Leases are too small for the blobs, a few hundred KB a replica at 12,500 nodes) and
:class:`MemoryExchange` (the fake for tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from analyzer.detectors.marginal import Scores
from analyzer.pools import Pool

log = logging.getLogger(__name__)
KEEP_CYCLES = 4
SEP = "\x1f"  # joins a key's parts (variant, signal, group) in the JSON


class Exchange(Protocol):
    poll_s: float  # how often a waiting replica reads the members' scores
    max_blob: int | None  # the most bytes one replica's scores may take (None: no limit)

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        """Leave ``replica``'s scores of ``cycle`` (OSError when it cannot)."""

    def get(self, cycle: int) -> dict[str, bytes]:
        """Every replica's scores of ``cycle`` left so far (OSError when unreadable)."""

    def leave(self, replica: str) -> None:
        """``replica`` is going away: its scores may go too."""


def _arrays(of: Mapping[Any, np.ndarray]) -> dict[str, list[float]]:
    return {SEP.join(k): [float(x) for x in v] for k, v in of.items()}


def encode(s: Scores) -> bytes:
    doc = {
        "values": _arrays(s.values),
        "sizes": dict(s.sizes),
        "clocks": _arrays(s.clocks),
        "clock_nodes": {SEP.join(k): n for k, n in s.clock_nodes.items()},
        "slowest": _arrays(s.slowest),
        "names": {SEP.join(k): list(v) for k, v in s.names.items()},
        "pools": {q: {"values": _arrays({(k,): v for k, v in p.values.items()}),
                      "nodes": dict(p.nodes)} for q, p in s.pools.items()},
    }  # fmt: skip
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode())


def fitted(s: Scores, limit: int | None) -> tuple[bytes, list[str]]:
    """:func:`encode` of ``s``, its largest pools left out (the most values first, each
    named in the log) until the blob is at most ``limit`` bytes (None: no limit); and the
    names of the pools left out. The other replicas then judge those comparisons without
    this part's values; the marginal scores are never left out (a blob still too large is
    the exchange's to refuse)."""
    blob = encode(s)
    pools = dict(s.pools)
    dropped: list[str] = []
    while limit is not None and len(blob) > limit and pools:
        big = max(sorted(pools), key=lambda q: sum(len(v) for v in pools[q].values.values()))
        log.warning("scores of %d bytes are more than the exchange holds (%d): pool %s "
                    "left out", len(blob), limit, big)  # fmt: skip
        del pools[big]
        dropped.append(big)
        blob = encode(replace(s, pools=pools))
    return blob, dropped


def decode(blob: bytes) -> Scores:
    """The scores of :func:`encode`; ValueError naming what is wrong otherwise."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"marginal scores: not a compressed JSON document ({e})") from None
    try:
        return Scores(
            values={_key(k, 3): np.array(v, dtype=float) for k, v in doc["values"].items()},
            sizes={str(k): int(v) for k, v in doc["sizes"].items()},
            clocks={_key(k, 2): np.array(v, dtype=float) for k, v in doc["clocks"].items()},
            clock_nodes={_key(k, 2): int(v) for k, v in doc["clock_nodes"].items()},
            slowest={_key(k, 2): np.array(v, dtype=float) for k, v in doc["slowest"].items()},
            names={_key(k, 3): tuple(str(x) for x in v) for k, v in doc["names"].items()},
            # a replica of a release before the pools leaves none (a rolling upgrade)
            pools={str(q): _pool(p) for q, p in doc.get("pools", {}).items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"marginal scores: malformed document ({e!r})") from None


def _pool(doc: Mapping[str, Any]) -> Pool:
    return Pool({str(k): np.array(v, dtype=float) for k, v in doc["values"].items()},
                {str(k): int(v) for k, v in doc["nodes"].items()})  # fmt: skip


def encode_memory(nodes: Iterable[str], memory: Mapping[str, Any]) -> bytes:
    """What a replica's engine remembers of the nodes it judged this cycle
    (:meth:`analyzer.engine.Engine.remember`), for the replica that judges them next
    (:mod:`analyzer.replicas.handover`). The same JSON conventions as the scores."""
    doc = {"nodes": sorted(nodes), "memory": dict(memory)}
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode())


def decode_memory(blob: bytes) -> dict[str, Any]:
    """``{"nodes": [...], "memory": {...}}`` of :func:`encode_memory`; ValueError naming what
    is wrong otherwise (what is inside ``memory`` is read by the engine's ``adopt``)."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"detector memory: not a compressed JSON document ({e})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)
            and isinstance(doc.get("memory"), dict)):  # fmt: skip
        raise ValueError("detector memory: not an object with a list of nodes and a memory")
    return doc


@runtime_checkable
class MemoryBoard(Protocol):
    """Where replicas leave their detector memory after each cycle (optional: an exchange
    without it hands none over, and a moved node is judged afresh)."""

    def put_memory(self, cycle: int, replica: str, blob: bytes) -> None:
        """Leave ``replica``'s memory as of the end of ``cycle`` (OSError when it cannot)."""

    def get_memory(self, cycle: int) -> dict[str, bytes]:
        """Every replica's memory as of the end of ``cycle`` (OSError when unreadable)."""


def _key(k: str, parts: int) -> Any:
    got = tuple(k.split(SEP))
    if len(got) != parts:
        raise ValueError(f"key {k!r} has {len(got)} parts, not {parts}")
    return got


@dataclass
class MemoryExchange:
    """In-process, the same semantics (the fake for tests)."""

    _cycles: dict[int, dict[str, bytes]] = field(default_factory=dict)
    _topologies: dict[int, bytes] = field(default_factory=dict)
    _memories: dict[int, dict[str, bytes]] = field(default_factory=dict)
    poll_s: float = 0.05
    max_blob: int | None = None

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        _keep(self._cycles, cycle, replica, blob)

    def get(self, cycle: int) -> dict[str, bytes]:
        return dict(self._cycles.get(cycle, {}))

    def leave(self, replica: str) -> None:
        """Its scores go; its memory stays for the replicas that take its nodes over."""
        for part in self._cycles.values():
            part.pop(replica, None)

    def put_memory(self, cycle: int, replica: str, blob: bytes) -> None:
        _keep(self._memories, cycle, replica, blob)

    def get_memory(self, cycle: int) -> dict[str, bytes]:
        return dict(self._memories.get(cycle, {}))

    def put_topology(self, cycle: int, blob: bytes) -> None:
        self._topologies[cycle] = blob
        for old in sorted(self._topologies)[:-KEEP_CYCLES]:
            del self._topologies[old]

    def get_topology(self, cycle: int) -> bytes | None:
        return self._topologies.get(cycle)


def _keep(parts: dict[int, dict[str, bytes]], cycle: int, replica: str, blob: bytes) -> None:
    """``replica``'s blob of ``cycle`` kept in memory; the cycles older than the last few go."""
    parts.setdefault(cycle, {})[replica] = blob
    for old in sorted(parts)[:-KEEP_CYCLES]:
        del parts[old]


class DirectoryExchange:
    """``<root>/scores/<cycle>/<replica>``, ``<root>/memory/<cycle>/<replica>`` and
    ``<root>/topology/<cycle>``; the cycles older than the last few are removed."""

    poll_s = 0.05
    max_blob: int | None = None  # a file holds what the replica leaves

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root) / "scores"
        self.root.mkdir(parents=True, exist_ok=True)
        self.topologies = Path(root) / "topology"
        self.topologies.mkdir(exist_ok=True)
        self.memories = Path(root) / "memory"
        self.memories.mkdir(exist_ok=True)

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        _write_part(self.root, cycle, replica, blob)

    def put_topology(self, cycle: int, blob: bytes) -> None:
        _write(self.topologies, str(cycle), blob)
        _prune(self.topologies, Path.unlink)

    def get_topology(self, cycle: int) -> bytes | None:
        try:
            return (self.topologies / str(cycle)).read_bytes()
        except FileNotFoundError:
            return None

    def put_memory(self, cycle: int, replica: str, blob: bytes) -> None:
        _write_part(self.memories, cycle, replica, blob)

    def get_memory(self, cycle: int) -> dict[str, bytes]:
        return _read(self.memories / str(cycle))

    def get(self, cycle: int) -> dict[str, bytes]:
        return _read(self.root / str(cycle))

    def leave(self, replica: str) -> None:
        return None  # its files go with their cycles


def _write_part(root: Path, cycle: int, replica: str, blob: bytes) -> None:
    """``root/<cycle>/<replica>`` written whole; the cycles older than the last few go."""
    d = root / str(cycle)
    d.mkdir(exist_ok=True)
    _write(d, replica, blob)
    _prune(root, lambda p: shutil.rmtree(p, ignore_errors=True))


def _read(d: Path) -> dict[str, bytes]:
    """Every replica's file in ``d`` (none: {})."""
    if not d.is_dir():
        return {}
    out = {}
    for p in d.iterdir():
        if p.name.startswith("."):
            continue
        try:
            out[p.name] = p.read_bytes()
        except FileNotFoundError:  # removed with its cycle meanwhile
            continue
    return out


def _write(d: Path, name: str, blob: bytes) -> None:
    """``d/name`` written whole: a reader sees the old file, the new one, or none."""
    tmp = d / f".{name}.{os.getpid()}.tmp"
    tmp.write_bytes(blob)
    tmp.rename(d / name)


def _prune(d: Path, remove: Callable[[Path], object]) -> None:
    """Remove the entries of ``d`` named by cycles older than the last few."""
    held = sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())
    for old in held[:-KEEP_CYCLES]:
        with contextlib.suppress(FileNotFoundError):  # another replica pruned it first
            remove(d / str(old))
