"""Files that several processes, on one host or on hosts sharing a file system, read and
replace: an exclusive ``flock`` for a read-modify-write, and a JSON document replaced whole
(``rename``), never seen half written. The file system must honour ``flock`` between hosts
for the lock to hold there (local disk, NFSv4, CephFS, Lustre mounted with ``flock``).
Used by the analyzer replicas' meeting directory and remediation's lease directory."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (made if missing) for the block."""
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_json(path: Path, doc: Any) -> None:
    """Replace ``path`` with ``doc`` as JSON, whole: a temporary file beside it, renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)
