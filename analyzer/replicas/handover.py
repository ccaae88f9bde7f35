"""A unit's detector memory goes with it from the replica that judged it to the one that takes
it over, so the sharded path judges a moved node as the single process would: a straggler's
streak goes on, a port's flaps are still counted, an XID incident stays open.

Units move when a job joins or splits them, or a member comes or goes. Each cycle a replica
hands over what its engine remembers of the nodes it judged last cycle and does not own now
(:meth:`Handover.give`, :meth:`analyzer.engine.Engine.remember`), inside the part it leaves
on the exchange with its marginal scores (:func:`analyzer.replicas.exchange.encode`). It
leaves that part before it judges the cycle, so the memory is as of the end of the last one:
where the new owner goes on is where the old one stopped. The new owner reads the members'
parts anyway (marginal needs them) and adopts the memory of the nodes it gained before it
judges (:meth:`Handover.take`); the old owner then forgets them (:meth:`Handover.close`).

Nodes gained without memory are judged as a freshly started analyzer would, and counted:
the first cycle after a start, an owner that died or was cut off from the exchange, a part
that does not read. Pure apart from the engine's memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from analyzer.engine import Engine


@dataclass(frozen=True)
class Taken:
    adopted: int = 0  # gained nodes whose previous owner's memory came with them
    fresh: int = 0  # gained nodes without it
    unreadable: tuple[str, ...] = ()  # parts of a memory that did not read (left as they were)


@dataclass
class Handover:
    judged: frozenset[str] = field(default_factory=frozenset)  # the nodes of the last cycle

    def give(self, engine: Engine, now: frozenset[str]) -> dict[str, Any] | None:
        """What this replica hands over this cycle: its memory of the nodes it judged last
        cycle and does not own ``now`` (None: it gives none away)."""
        given = self.judged - now
        if not given:
            return None
        return {"nodes": sorted(given), "memory": engine.remember(given)}

    def take(self, engine: Engine, parts: Iterable[Mapping[str, Any]],
             now: frozenset[str]) -> Taken:  # fmt: skip
        """Adopt from ``parts`` (what the other members handed over this cycle) the memory
        of the nodes gained ``now``; a part naming nodes this replica did not gain is not
        its to take (another replica's, or a plan this one does not share)."""
        gained = now - self.judged
        adopted: set[str] = set()
        bad: list[str] = []
        for part in parts:
            try:
                nodes = {str(n) for n in part.get("nodes", [])} & gained - adopted
                memory = part.get("memory") or {}
                if nodes and not isinstance(memory, Mapping):
                    raise TypeError(f"memory is a {type(memory).__name__}")
            except (TypeError, AttributeError) as e:
                bad.append(f"handover ({e})")
                continue
            if nodes:
                bad += engine.adopt(memory, nodes)
                adopted |= nodes
        return Taken(len(adopted), len(gained - adopted), tuple(bad))

    def close(self, engine: Engine, now: frozenset[str]) -> None:
        """The cycle is judged: forget the nodes given away (their memory went with them, and
        a node that comes back later comes back with its new owner's), remember ``now``."""
        if gone := self.judged - now:
            engine.adopt({}, gone)
        self.judged = now
