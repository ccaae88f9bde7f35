"""Samples spooled per metric family, then joined into one OpenMetrics file: OpenMetrics wants
each family's samples together, and the recorders write one step of every family at a time.
One piece for the recorders of each telemetry (gpuwarden's, dcgm-exporter's, AMD DME's)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


class FamilySpool:
    def __init__(self, prefix: str, workdir: Path | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
        self._files: dict[str, IO[str]] = {}

    def _out(self, family: str) -> IO[str]:
        f = self._files.get(family)
        if f is None:
            f = self._files[family] = (self.dir / family).open("w")
        return f

    def _join(self, path: Path, type_line: Callable[[str], str], mode: str = "w",
              eof: bool = True) -> Path:  # fmt: skip
        """Every spooled family after its ``# TYPE`` line into ``path`` (``mode`` "a": after
        what another recorder wrote there; ``eof`` False: another will follow)."""
        with path.open(mode) as out:
            for family, f in self._files.items():
                f.close()
                out.write(type_line(family))
                with (self.dir / family).open() as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            if eof:
                out.write("# EOF\n")
        self._files.clear()
        return path

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)
