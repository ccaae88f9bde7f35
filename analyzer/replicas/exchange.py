"""Where replicas leave their marginal scores for each other, once a cycle (the second step of
:mod:`analyzer.replicas.judge`'s fleet-wide comparison).

Edge of the sharded analyzer. A replica :meth:`~Exchange.put`\\ s its part's
:class:`~analyzer.detectors.marginal.Scores` for cycle ``k`` (:func:`encode`: JSON, floats
written as Python's shortest round-trip repr so the values read back bit for bit, zlib
compressed), then reads the others' for ``k`` until every member of the plan has put or its
wait runs out. The same backends are the :class:`~analyzer.replicas.sharing.TopologyBoard`
where the leader leaves the fleet topology it read for ``k`` (``put_topology``, one blob a
cycle). Backends: :class:`DirectoryExchange` (the bare-metal meeting directory,
``scores/<cycle>/<replica>`` and ``topology/<cycle>``, each file written whole and renamed
into place),
:class:`analyzer.replicas.configmaps.ConfigMapExchange` (Kubernetes: a ConfigMap per
replica; Leases are too small for the blobs, a few hundred KB a replica at 12,500 nodes) and
:class:`MemoryExchange` (the fake for tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from analyzer.detectors.marginal import Scores

KEEP_CYCLES = 4
SEP = "\x1f"  # joins a key's parts (variant, signal, group) in the JSON


class Exchange(Protocol):
    poll_s: float  # how often a waiting replica reads the members' scores

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        """Leave ``replica``'s scores of ``cycle`` (OSError when it cannot)."""

    def get(self, cycle: int) -> dict[str, bytes]:
        """Every replica's scores of ``cycle`` left so far (OSError when unreadable)."""

    def leave(self, replica: str) -> None:
        """``replica`` is going away: its scores may go too."""


def _arrays(of: Mapping[Any, np.ndarray]) -> dict[str, list[float]]:
    return {SEP.join(k): [float(x) for x in v] for k, v in of.items()}


def encode(s: Scores, handover: Mapping[str, Any] | None = None) -> bytes:
    """``s`` and, when there is one, the memory this replica hands over with them
    (:mod:`analyzer.replicas.handover`: the nodes it judged last cycle and no longer owns)."""
    doc: dict[str, Any] = {
        "values": _arrays(s.values),
        "sizes": dict(s.sizes),
        "clocks": _arrays(s.clocks),
        "clock_nodes": {SEP.join(k): n for k, n in s.clock_nodes.items()},
        "slowest": _arrays(s.slowest),
        "names": {SEP.join(k): list(v) for k, v in s.names.items()},
    }
    if handover:
        doc["handover"] = handover
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode())


def decode(blob: bytes) -> Scores:
    """The scores of :func:`encode`; ValueError naming what is wrong otherwise."""
    return decode_part(blob)[0]


def decode_part(blob: bytes) -> tuple[Scores, dict[str, Any]]:
    """The scores and the memory handed over (empty: none) of :func:`encode`; ValueError
    naming what is wrong otherwise. A part written before memory was handed over has none;
    one written by a later version with keys this one does not know reads the same."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"marginal scores: not a compressed JSON document ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"marginal scores: a JSON {type(doc).__name__}, not an object")
    handover = doc.get("handover") or {}
    if not isinstance(handover, dict):
        raise ValueError(f"handover: a JSON {type(handover).__name__}, not an object")
    try:
        return _scores(doc), handover
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"marginal scores: malformed document ({e!r})") from None


def _scores(doc: dict[str, Any]) -> Scores:
    return Scores(
        values={_key(k, 3): np.array(v, dtype=float) for k, v in doc["values"].items()},
        sizes={str(k): int(v) for k, v in doc["sizes"].items()},
        clocks={_key(k, 2): np.array(v, dtype=float) for k, v in doc["clocks"].items()},
        clock_nodes={_key(k, 2): int(v) for k, v in doc["clock_nodes"].items()},
        slowest={_key(k, 2): np.array(v, dtype=float) for k, v in doc["slowest"].items()},
        names={_key(k, 3): tuple(str(x) for x in v) for k, v in doc["names"].items()},
    )


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
    poll_s: float = 0.05

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        self._cycles.setdefault(cycle, {})[replica] = blob
        for old in sorted(self._cycles)[:-KEEP_CYCLES]:
            del self._cycles[old]

    def get(self, cycle: int) -> dict[str, bytes]:
        return dict(self._cycles.get(cycle, {}))

    def leave(self, replica: str) -> None:
        for part in self._cycles.values():
            part.pop(replica, None)

    def put_topology(self, cycle: int, blob: bytes) -> None:
        self._topologies[cycle] = blob
        for old in sorted(self._topologies)[:-KEEP_CYCLES]:
            del self._topologies[old]

    def get_topology(self, cycle: int) -> bytes | None:
        return self._topologies.get(cycle)


class DirectoryExchange:
    """``<root>/scores/<cycle>/<replica>`` and ``<root>/topology/<cycle>``; the cycles older
    than the last few are removed."""

    poll_s = 0.05

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root) / "scores"
        self.root.mkdir(parents=True, exist_ok=True)
        self.topologies = Path(root) / "topology"
        self.topologies.mkdir(exist_ok=True)

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        d = self.root / str(cycle)
        d.mkdir(exist_ok=True)
        _write(d, replica, blob)
        _prune(self.root, lambda p: shutil.rmtree(p, ignore_errors=True))

    def put_topology(self, cycle: int, blob: bytes) -> None:
        _write(self.topologies, str(cycle), blob)
        _prune(self.topologies, Path.unlink)

    def get_topology(self, cycle: int) -> bytes | None:
        try:
            return (self.topologies / str(cycle)).read_bytes()
        except FileNotFoundError:
            return None

    def get(self, cycle: int) -> dict[str, bytes]:
        d = self.root / str(cycle)
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

    def leave(self, replica: str) -> None:
        return None  # its files go with their cycles


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
