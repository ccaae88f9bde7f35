"""dcgm-exporter's naming generations, as the analyzer reads them: field -> (name, divisor).

Pure table. A catalogue :class:`~exporter.catalog.DcgmField` names a field as dcgm-exporter
3.x and 4.0 to 4.8 print it (etc/default-counters.csv), in that generation's unit
(``scale``: native x scale = dcgm's value). A later generation that renames a field or changes
its unit (MHz -> Hz, percent -> a 0-1 ratio, MiB -> bytes) adds a row to :data:`RENAMED`:
``legacy name -> ((generation, new name, divisor into the catalogue's unit), ...)``. The
reader asks Prometheus for every generation's name of a field (only those discovery found),
so a fleet halfway through an upgrade reads as one.

The rows of 4.9 and 4.10 belong with the vendored field lists of those releases (the
exporter's ``--compat dcgm:<generation>``, exporter side); the dcgm-exporter history this
module was written from (NVIDIA/dcgm-exporter up to 4.5.3-4.8.2 and main at d5e5f51) has
no such rename yet, only the ``Hostname`` -> ``hostname`` label (:mod:`.identity`), so the
table starts empty rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter import catalog

LEGACY = "4.0-4.8"
RENAMED: Mapping[str, tuple[tuple[str, str, float], ...]] = {}


def names_of(
    f: catalog.DcgmField, renamed: Mapping[str, tuple[tuple[str, str, float], ...]] | None = None
) -> tuple[tuple[str, float], ...]:
    """Every generation's name of ``f`` with the divisor that gives the catalogue's unit."""
    table = RENAMED if renamed is None else renamed
    return ((f.name, f.scale), *((name, div) for _, name, div in table.get(f.name, ())))


def generation_of(name: str, renamed: Mapping[str, tuple[tuple[str, str, float], ...]] | None = None
                  ) -> str:  # fmt: skip
    """The generation a dcgm name belongs to (the legacy one unless a later one renamed it)."""
    table = RENAMED if renamed is None else renamed
    for rows in table.values():
        for gen, new, _ in rows:
            if new == name:
                return gen
    return LEGACY
