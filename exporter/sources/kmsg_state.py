"""Where the XID collector stopped reading the kernel log, and what it had counted, on disk.

Sits beside :mod:`exporter.sources.kmsg`: the XID collector saves its reader's position and its
per-(GPU, XID) counts here after a cycle that changed them, and restores both at start. An
exporter restart (a crash, a new Kubernetes pod, an upgrade) then neither re-reads old kernel
log records nor resets ``gpuwarden_gpu_xid_errors_total``: the counter goes on from where it
was, so an XID from hours ago cannot look new and page again (issue 17).

The file is small JSON, replaced atomically (write a temporary file, fsync, rename). A missing
file is a first start; an unreadable or malformed one is reported (``load_error``) and treated
as a first start: the reader then skips records older than its backlog margin (see
``KernelLogReader.skip_older_than``), so the worst case is counting the last few minutes again.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

VERSION = 1


@dataclass
class XidState:
    """The reader position (reader-defined mapping) and counts keyed by (pci key, xid)."""

    position: dict[str, Any] = field(default_factory=dict)
    counts: dict[tuple[str, int], int] = field(default_factory=dict)


class XidStateFile:
    """Loads and saves :class:`XidState` at ``path``; never raises on I/O (fail soft)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.load_error = ""
        self.save_error = ""

    def load(self) -> XidState:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            return _parse(data)
        except FileNotFoundError:
            return XidState()
        except (OSError, ValueError, TypeError, KeyError) as e:
            self.load_error = f"{self.path}: {e}"
            return XidState()

    def save(self, state: XidState) -> bool:
        data = {
            "version": VERSION,
            "position": state.position,
            "counts": [[k, x, n] for (k, x), n in sorted(state.counts.items())],
        }
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=".xid-state.", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as e:
            self.save_error = f"{self.path}: {e.strerror or e}"
            return False
        self.save_error = ""
        return True


def _parse(data: Any) -> XidState:
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} XID state file")
    position = data.get("position") or {}
    if not isinstance(position, dict):
        raise ValueError("position is not a mapping")
    counts: dict[tuple[str, int], int] = {}
    for key, xid, n in data.get("counts") or []:
        if not isinstance(key, str) or int(n) < 0:
            raise ValueError(f"bad count entry {key!r} {xid!r} {n!r}")
        counts[(key, int(xid))] = int(n)
    return XidState(position, counts)
