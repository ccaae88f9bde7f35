"""Membership on bare metal: a directory every replica can reach (local disk for replicas on
one host, or a shared file system with POSIX locks: NFSv4, CephFS, Lustre with flock).

Edge of the sharded analyzer, the bare-metal twin of :mod:`analyzer.replicas.leases`:

- ``beats/<replica>.json``: one heartbeat per replica (``{"cycle", "at"}``), replaced
  atomically (write a temporary file, ``rename``);
- ``leader.json``: the leader lease (``holder``, ``until``) and the last few plans, read and
  replaced only while holding an exclusive ``flock`` on ``leader.lock``
  (:mod:`common.sharedfile`): that lock is the compare-and-swap a Lease's resourceVersion
  gives on Kubernetes.

Times are the replicas' wall clocks (keep them in NTP sync, as for Kubernetes Leases).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from analyzer.replicas.membership import Beat, Plan
from common.sharedfile import locked, write_json

KEEP_PLANS = 4


class DirectoryMembership:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.beats_dir = self.root / "beats"
        try:
            self.beats_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"membership directory {self.root}: {e.strerror}") from None
        if not os.access(self.beats_dir, os.W_OK):
            raise ValueError(f"membership directory {self.root} is not writable")

    # ----- heartbeats
    def heartbeat(self, replica: str, cycle: int, now: float) -> None:
        write_json(self.beats_dir / f"{replica}.json", {"cycle": cycle, "at": now})

    def beats(self) -> list[Beat]:
        out = []
        for p in sorted(self.beats_dir.glob("*.json")):
            try:
                doc = json.loads(p.read_text())
                out.append(Beat(p.stem, int(doc["cycle"]), float(doc["at"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # removed meanwhile, or not ours: not a member
        return out

    def leave(self, replica: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.beats_dir / f"{replica}.json").unlink()
        with self._locked() as doc:
            if doc.get("holder") == replica:
                doc["holder"], doc["until"] = "", 0.0

    # ----- the leader lease and its plans
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with locked(self.root / "leader.lock"):
            doc = self._read()
            before = json.dumps(doc, sort_keys=True)
            yield doc
            if json.dumps(doc, sort_keys=True) != before:
                write_json(self.root / "leader.json", doc)

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads((self.root / "leader.json").read_text())
        except FileNotFoundError:
            return {"holder": "", "until": 0.0, "plans": {}}
        except ValueError:  # torn by hand: start the lease over, never crash the replica
            return {"holder": "", "until": 0.0, "plans": {}}
        return doc if isinstance(doc, dict) else {"holder": "", "until": 0.0, "plans": {}}

    def lead(self, replica: str, now: float, ttl: float) -> bool:
        with self._locked() as doc:
            if doc.get("holder") in ("", replica) or now >= float(doc.get("until", 0.0)):
                doc["holder"], doc["until"] = replica, now + ttl
            return bool(doc["holder"] == replica)

    def publish(self, replica: str, plan: Plan, now: float) -> Plan | None:
        with self._locked() as doc:
            if doc.get("holder") != replica or now >= float(doc.get("until", 0.0)):
                return None
            plans = doc.setdefault("plans", {})
            plans.setdefault(str(plan.cycle), {"members": list(plan.members),
                                               "leader": plan.leader})  # fmt: skip
            for old in sorted(plans, key=int)[:-KEEP_PLANS]:
                del plans[old]
            return _plan(plan.cycle, plans[str(plan.cycle)])

    def plan(self, cycle: int) -> Plan | None:
        got = self._read().get("plans", {}).get(str(cycle))
        return _plan(cycle, got) if isinstance(got, dict) else None


def _plan(cycle: int, doc: dict[str, Any]) -> Plan:
    return Plan(cycle, tuple(doc.get("members", ())), str(doc.get("leader", "")))
