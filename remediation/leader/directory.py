"""The remediation lease in a directory the instances share (bare metal).

Where slurmctld runs with a backup controller, the two hosts already share a directory (its
``StateSaveLocation``); one beside it holds the lease and the journal. The record,
``remediation-leader.json`` (``holder``, ``generation``, ``nonce``, ``lease_s``), is read and
replaced only under an exclusive ``flock`` on ``remediation-leader.lock``, and replaced by
``rename`` (:mod:`common.sharedfile`): the lock gives the compare-and-swap a Lease's
resourceVersion gives on Kubernetes. The version is the generation and a random nonce, so a
record removed and made again never repeats one a reader saw before. The file system must
honour ``flock`` between hosts (local disk, NFSv4, CephFS, Lustre mounted with ``flock``). A
record that does not read is an error, never a free lease: stop the instances and remove
the file to start the election over.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from common.sharedfile import locked, write_json
from remediation.leader.elector import Record

RECORD = "remediation-leader.json"
LOCK = "remediation-leader.lock"


class DirectoryLeaseStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ValueError(f"--leader-dir {self.root}: not a directory")
        if not os.access(self.root, os.W_OK):
            raise ValueError(f"--leader-dir {self.root}: not writable")

    def describe(self) -> str:
        return f"{self.root / RECORD}"

    def _read(self) -> dict[str, Any] | None:
        path = self.root / RECORD
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(
                f"{path}: not a lease record ({e}); stop the instances, remove it to elect anew"
            ) from None
        ok = (
            isinstance(doc, dict)
            and isinstance(doc.get("holder"), str)
            and type(doc.get("generation")) is int
            and isinstance(doc.get("nonce"), str)
            and type(doc.get("lease_s")) in (int, float)
            and doc["lease_s"] > 0
        )
        if not ok:
            raise ValueError(
                f"{path}: not a lease record (wants holder, generation, nonce, lease_s > 0); "
                "stop the instances, remove it to elect anew"
            )
        return doc

    def read(self) -> Record | None:
        with locked(self.root / LOCK):
            doc = self._read()
        if doc is None:
            return None
        return Record(doc["holder"], _version(doc), float(doc["lease_s"]))

    def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
        with locked(self.root / LOCK):
            doc = self._read()
            current = None if doc is None else _version(doc)
            if current != expect:
                return None
            new = {"holder": holder, "generation": 1 if doc is None else doc["generation"] + 1,
                   "nonce": secrets.token_hex(4), "lease_s": math.ceil(lease_s)}  # fmt: skip
            write_json(self.root / RECORD, new)
        return _version(new)


def _version(doc: dict[str, Any]) -> str:
    return f"{doc['generation']}.{doc['nonce']}"
