"""DME serves ``gpu_afid_errors`` only from a GPU's first RAS event on: a discovery made before
it must still read the field behind every prefix DME uses, or an analyzer that started on a
healthy fleet would never see an AFID."""

from __future__ import annotations

from analyzer.sources.dialects import amd
from exporter import catalog as c


def _afid_sources(present: frozenset[str]) -> set[str]:
    return {q.source for q in amd.queries(present=present) if q.metric is c.GPU_RAS_EVENTS}


def test_the_afid_gauge_is_read_behind_every_prefix_found_even_before_it_exists():
    present = frozenset({"amd_gpu_health", "gpu_health", "amd_gpu_junction_temperature"})
    assert _afid_sources(present) == {"amd_gpu_afid_errors", "gpu_afid_errors"}


def test_a_prometheus_without_dme_reads_no_afid_gauge():
    assert _afid_sources(frozenset({c.GPU_UP.name, c.GPU_TEMPERATURE.dcgm[0].name})) == set()
