"""dcgm-exporter's naming generations, as the analyzer reads them: field -> (name, divisor).

No table of its own: :mod:`exporter.catalog_dcgm` (a data leaf beside the catalogue, the one
the exporter's ``--compat dcgm:<generation>`` renders from) names every field in each
generation and gives the factor into the catalogue's native unit (``to_native``). This module
turns that into what the reader asks Prometheus for: every generation's name of a field with
the divisor that gives the catalogue's unit. The reader asks for all of them (only those
discovery found), so each node is read in the names it serves and a fleet halfway through an
upgrade reads as one: 4.8's MHz, % and MiB are divided into Hz, ratio and bytes. Of 4.9's
names only the new base-unit fields are native: ``DCGM_FI_DEV_SM_CLOCK_HERTZ`` (Hz, divisor
1) and the energy in joules; a renamed alias keeps its field id and so its value, so
``DCGM_FI_DEV_GPU_UTIL_RATIO`` is still 0-100 (divided by 100 like ``DCGM_FI_DEV_GPU_UTIL``)
and the framebuffer fields keep their names and MiB (docs/dcgm-generations.md).

4.9 and 4.10 name the fields alike, so a name is attributed to the earliest generation that
uses it (:func:`generation_of`). The names and units are sourced from DCGM 4.6.1's field
header (fixtures/dcgm/dcgm-4.6.1-field-names.tsv); which dcgm-exporter release adopted them
is assumed, not vendored (fixtures/dcgm-exporter/README.md).
"""

from __future__ import annotations

import functools

from exporter import catalog
from exporter import catalog_dcgm as gens

LEGACY = gens.DEFAULT  # "4.8": 3.x and 4.0-4.8, the catalogue's own names
GENERATIONS = gens.GENERATIONS


def _exact(divide: float) -> float:
    """A divisor within rounding of a power of ten is that power (1e-6 * 1e6 is 1, not
    0.9999999999999999): native values stay exactly native."""
    for p in range(-9, 10):
        if abs(divide - 10.0**p) <= 1e-12 * 10.0**p:
            return 10.0**p
    return divide


@functools.cache
def _names() -> dict[str, tuple[tuple[str, float], ...]]:
    """4.8 name -> every generation's (name, divisor into the catalogue's unit), 4.8 first."""
    out: dict[str, dict[str, float]] = {}
    for gen in GENERATIONS:
        for name, (legacy, factor) in gens.to_native(gen).items():
            out.setdefault(legacy, {}).setdefault(name, _exact(1.0 / factor))
    return {k: tuple(v.items()) for k, v in out.items()}


@functools.cache
def _generation_of() -> dict[str, str]:
    out: dict[str, str] = {}
    for gen in GENERATIONS:
        for name in gens.to_native(gen):
            out.setdefault(name, gen)
        for x in catalog.DCGM_PRESENCE_FIELDS:
            if (renamed := gens.name_in(gen, x)) is not None:
                out.setdefault(renamed, gen)
    return out


def names_of(f: catalog.DcgmField) -> tuple[tuple[str, float], ...]:
    """Every generation's name of ``f`` with the divisor that gives the catalogue's unit."""
    return _names().get(f.name, ((f.name, f.scale),))


def names_of_field(legacy: str) -> tuple[str, ...]:
    """Every generation's name of the field 4.8 calls ``legacy`` (presence, last XID)."""
    return tuple(dict.fromkeys(n for g in GENERATIONS if (n := gens.name_in(g, legacy))))


def generation_of(name: str) -> str:
    """The earliest generation that names a dcgm field ``name`` (4.8 for any other name)."""
    return _generation_of().get(name, LEGACY)


def generations_of(names: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The generations a set of dcgm names shows: 4.8 where a 4.8-only name is present, 4.9
    where a 4.9 name is, 4.10 where a 4.10-only name is (a 4.10 fleet without its PCIe
    rates reads as 4.9: their default names are the same)."""
    got = {generation_of(n) for n in names if generation_of(n) != LEGACY or _only_legacy(n)}
    return tuple(g for g in GENERATIONS if g in got)


def _only_legacy(name: str) -> bool:
    """A name only 4.8 uses (later generations renamed it)."""
    return all(name not in gens.to_native(g) for g in GENERATIONS if g != LEGACY) and (
        name in gens.to_native(LEGACY) or name in catalog.DCGM_PRESENCE_FIELDS
    )


def driver_labels() -> tuple[str, ...]:
    """The driver-version label of every generation (identity, not read as a value)."""
    return tuple(dict.fromkeys(gens.DRIVER_LABEL[g] for g in GENERATIONS))
