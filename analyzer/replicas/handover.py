"""A node's detector memory goes with it from the replica that judged it to the one that
judges it next, so the sharded path judges a moved node as the single process would: a
straggler's streak goes on, a port's flaps are still counted, an XID incident stays open.

Nodes move between replicas when a job joins or splits units, a member comes or goes, or a
replica restarts. After judging cycle ``k`` a replica leaves on the exchange's
:class:`~analyzer.replicas.exchange.MemoryBoard` what its engine remembers of the nodes it
judged (:meth:`Handover.close`, :meth:`analyzer.engine.Engine.remember`). Before judging cycle
``k + 1`` every replica reads the memory left for ``k`` and adopts that of the nodes it gained
(:meth:`Handover.take`): where the new owner goes on is where the old one stopped. A replica
forgets the nodes it gave away (a node that comes back later comes back with its new
owner's memory). One restarted under its own name (a pod's container restart, a systemd
unit) finds its own memory of the last cycle there, as does the replica that takes over the
nodes of one that left (its memory stays on the board, the scores go).

Nodes gained without memory are judged as a freshly started analyzer would, and counted:
the first cycle of a new replica, an owner that died mid-cycle, a board out of reach, a
memory that does not read. Only the memory of the cycle just before counts: a replica that
skipped a cycle takes every node of the cycle after as gained, and memory older than one
cycle is never adopted (it would count a streak across a cycle nobody judged); a node found in
no memory keeps what this engine itself remembers of it, if anything. Pure apart
from the engine's memory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from analyzer.engine import Engine
from analyzer.replicas.exchange import decode_memory, encode_memory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Taken:
    adopted: int = 0  # gained nodes whose previous owner's memory came with them
    fresh: int = 0  # gained nodes without it
    unreadable: tuple[str, ...] = ()  # memories (or parts of one) that did not read


@dataclass
class Handover:
    judged: frozenset[str] = field(default_factory=frozenset)  # the nodes of cycle ``cycle``
    cycle: int | None = None  # the last cycle judged here (None: none yet)

    def take(self, engine: Engine, parts: Mapping[str, bytes], now: frozenset[str],
             cycle: int) -> Taken:  # fmt: skip
        """Before judging ``cycle``: adopt from ``parts`` (every replica's memory left for
        ``cycle - 1``, by replica) the memory of the nodes gained ``now``. A memory naming
        nodes this replica did not gain is not its to take (another replica's nodes)."""
        before = self.judged if self.cycle == cycle - 1 else frozenset()
        gained = now - before
        adopted: set[str] = set()
        bad: list[str] = []
        for replica in sorted(parts):
            try:
                doc = decode_memory(parts[replica])
            except ValueError as e:
                bad.append(f"{replica}: {e}")
                continue
            nodes = {str(n) for n in doc["nodes"]} & gained - adopted
            if nodes:
                bad += (f"{replica}: {part}" for part in engine.adopt(doc["memory"], nodes))
                adopted |= nodes
        for b in bad:
            log.warning("detector memory handed over by %s does not read", b)
        return Taken(len(adopted), len(gained - adopted), tuple(bad))

    def close(self, engine: Engine, now: frozenset[str], cycle: int) -> bytes:
        """``cycle`` is judged on ``now``: forget the nodes given away, and return what the
        engine remembers of ``now`` for the board."""
        if gone := self.judged - now:
            engine.adopt({}, gone)
        self.judged, self.cycle = now, cycle
        return encode_memory(now, engine.remember(now))
