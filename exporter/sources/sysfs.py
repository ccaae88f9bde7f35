"""Sysfs roots: the real directory tree and an in-memory fake, both a ``SysfsRoot``.

Sits at the exporter's edge: the InfiniBand collector reads ``class/infiniband/...`` through
one of these. :class:`DirSysfs` reads a real tree (``--sysfs-root``, default ``/sys``, or a
fixture tree under ``fixtures/sys``); :class:`DictSysfs` holds files in a dict so tests and the
fleet simulator can set, remove and break files without touching a disk.

Paths are relative to the root with ``/`` separators (``class/infiniband/mlx5_0/fw_ver``).
Errors are the filesystem's: FileNotFoundError, PermissionError, NotADirectoryError, ...
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path, PurePosixPath


# Cached: the same few hundred paths are read every cycle, on every simulated node too, and
# parsing a path costs more than the dict lookup it guards.
@lru_cache(maxsize=1 << 16)
def _parts(path: str) -> tuple[str, ...]:
    """Split a root-relative path; refuse anything that could leave the root."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise ValueError(f"sysfs path must stay inside the root: {path!r}")
    return tuple(part for part in p.parts if part != ".")


@lru_cache(maxsize=1 << 16)
def _key(path: str) -> str:
    return "/".join(_parts(path))


class DirSysfs:
    """A sysfs tree on disk.

    Symlinks are followed the way the kernel lays them out: on a real machine
    ``class/infiniband/mlx5_0`` is a link into ``devices/pci.../infiniband/mlx5_0``. Only the
    path a caller asks for is checked (no ``..``, not absolute); the kernel's own links are
    trusted, which keeps a read at one ``open`` instead of a ``realpath`` walk per file.
    """

    MAX_PATHS = 1 << 16  # a tree's paths are few and stable; the cap only guards churn

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._root = str(self.root).rstrip("/") or "/"
        self._paths: dict[str, str] = {}

    def _path(self, path: str) -> str:
        # The same few hundred paths are read every cycle: build each once. os.path.join on
        # every read was a quarter of an InfiniBand cycle.
        full = self._paths.get(path)
        if full is None:
            if len(self._paths) >= self.MAX_PATHS:
                self._paths.clear()
            full = self._paths[path] = "/".join((self._root, _key(path))).replace("//", "/")
        return full

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self._path(path)))

    def read_text(self, path: str) -> str:
        # Bytes, then a lenient decode: a counter file holding garbage must reach the parser
        # (and be counted as non-numeric there), not blow up as a UnicodeDecodeError here.
        # os.open/os.read, not open(): no buffered file object per read, which was most of
        # an InfiniBand cycle. A sysfs attribute is at most one page; read on until EOF anyway.
        fd = os.open(self._path(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = [os.read(fd, 65536)]
            while len(chunks[-1]) == 65536:
                chunks.append(os.read(fd, 65536))
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self._path(path))


class DictSysfs:
    """In-memory sysfs: relative path -> file content; directories are implied by the files.

    ``set`` is a dict store plus, for a new file only, a walk up its parents; the fleet
    simulator calls it for every counter of every port each step.
    """

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self._files: dict[str, str] = {}
        self._children: dict[str, set[str]] = {"": set()}
        self._failures: dict[str, OSError] = {}
        for path, text in (files or {}).items():
            self.set(path, text)

    @staticmethod
    def _key(path: str) -> str:
        return _key(path)

    def set(self, path: str, text: str) -> None:
        """Create or overwrite a file (its parent directories appear with it)."""
        key = self._key(path)
        if key in self._children:
            raise IsADirectoryError(f"{path!r} is a directory")
        if key not in self._files:
            self._link(key)
        self._files[key] = text

    def _link(self, key: str) -> None:
        parent, _, name = key.rpartition("/")
        ancestor = parent
        while ancestor:
            if ancestor in self._files:
                raise NotADirectoryError(f"{ancestor!r} is a file")
            ancestor = ancestor.rpartition("/")[0]
        while True:
            siblings = self._children.get(parent)
            if siblings is not None:
                siblings.add(name)
                return
            self._children[parent] = {name}
            parent, _, name = parent.rpartition("/")

    def remove(self, path: str) -> None:
        """Remove a file, or a directory with everything under it (a device vanishing)."""
        key = self._key(path)
        if key in self._files:
            del self._files[key]
        elif key in self._children and key:
            prefix = key + "/"
            for k in [k for k in self._files if k.startswith(prefix)]:
                del self._files[k]
            for k in [k for k in self._children if k.startswith(prefix)]:
                del self._children[k]
            del self._children[key]
        else:
            raise FileNotFoundError(path)
        self._unlink(key)

    def _unlink(self, key: str) -> None:
        # A directory exists only while something is under it: prune parents left empty.
        while key:
            parent, _, name = key.rpartition("/")
            siblings = self._children[parent]
            siblings.discard(name)
            if siblings or not parent:
                return
            del self._children[parent]
            key = parent

    def fail(self, path: str, exc: OSError) -> None:
        """Make every read or listing of ``path`` raise ``exc`` (until ``heal``)."""
        self._failures[self._key(path)] = exc

    def heal(self, path: str) -> None:
        self._failures.pop(self._key(path), None)

    def _check(self, key: str) -> None:
        exc = self._failures.get(key)
        if exc is not None:
            raise exc

    def listdir(self, path: str) -> list[str]:
        key = self._key(path)
        self._check(key)
        children = self._children.get(key)
        if children is None:
            if key in self._files:
                raise NotADirectoryError(path)
            raise FileNotFoundError(path)
        return sorted(children)

    def read_text(self, path: str) -> str:
        key = self._key(path)
        self._check(key)
        text = self._files.get(key)
        if text is None:
            if key in self._children:
                raise IsADirectoryError(path)
            raise FileNotFoundError(path)
        return text

    def is_dir(self, path: str) -> bool:
        return self._key(path) in self._children
