"""What a detector remembers of a node between cycles, as a JSON document another engine can
adopt: how the sharded analyzer's replica that takes a unit over goes on judging its nodes
where the previous owner left off (:mod:`analyzer.replicas.handover`), instead of as a freshly
started analyzer would (a straggler's streak restarted, a port's flaps forgotten).

A detector with memory per node implements :class:`Remembers`: ``remember(nodes)`` returns its
memory of those nodes (JSON: str keys, lists, floats written as Python's shortest repr, so
they read back bit for bit); ``adopt(doc, nodes)`` replaces its memory of ``nodes`` with the
document's (an empty document: forgets them). ``adopt`` reads the whole document before it
changes anything, so a malformed one (ValueError, KeyError or TypeError) leaves the memory as
it was. Pure; the helpers here are the shared shapes (findings, per-node entries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any, Protocol, TypeVar, runtime_checkable

from analyzer.findings import Finding

K = TypeVar("K")
V = TypeVar("V")


@runtime_checkable
class Remembers(Protocol):
    name: str

    def remember(self, nodes: Set[str]) -> dict[str, Any]: ...

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None: ...


def finding_doc(f: Finding) -> dict[str, Any]:
    """``f`` whole: every field, unrounded (``Finding.to_json`` rounds for display)."""
    return {"node": f.node, "subject": f.subject, "kind": f.kind, "severity": f.severity,
            "action": f.action, "detector": f.detector, "confidence": float(f.confidence),
            "since": float(f.since), "evidence": {k: float(v) for k, v in f.evidence.items()},
            "summary": f.summary}  # fmt: skip


def finding_of(d: Mapping[str, Any]) -> Finding:
    return Finding(
        str(d["node"]), str(d["subject"]), str(d["kind"]), str(d["severity"]), str(d["action"]),
        str(d["detector"]), float(d["confidence"]), float(d["since"]),
        {str(k): float(v) for k, v in dict(d["evidence"]).items()}, str(d["summary"]),
    )  # fmt: skip


def entries(mapping: Mapping[K, V], nodes: Set[str], node: Callable[[K], str]) -> list[tuple[K, V]]:
    """The entries of ``mapping`` whose key names a node of ``nodes``, in key order."""
    return sorted(
        ((k, v) for k, v in mapping.items() if node(k) in nodes), key=lambda kv: str(kv[0])
    )


def replaced(mapping: Mapping[K, V], nodes: Set[str], node: Callable[[K], str],
             adopted: Iterable[tuple[K, V]]) -> dict[K, V]:  # fmt: skip
    """``mapping`` with its entries on ``nodes`` replaced by ``adopted``'s (those on
    ``nodes``; an entry on another node is not this adoption's to make)."""
    out = {k: v for k, v in mapping.items() if node(k) not in nodes}
    out.update((k, v) for k, v in adopted if node(k) in nodes)
    return out


def first(k: tuple[Any, ...]) -> str:
    return str(k[0])


def second(k: tuple[Any, ...]) -> str:
    return str(k[1])


def ident(k: str) -> str:
    return k


Held = dict[tuple[str, str, str], tuple[Finding, float]]


def held_doc(active: Held, nodes: Set[str]) -> list[list[Any]]:
    """Findings held until a time (the XID and AFID detectors'), those on ``nodes``."""
    return [[finding_doc(f), until] for _, (f, until) in entries(active, nodes, first)]


def held_of(doc: Iterable[Any]) -> list[tuple[tuple[str, str, str], tuple[Finding, float]]]:
    out = []
    for d, until in doc:
        f = finding_of(d)
        out.append((f.key, (f, float(until))))
    return out
