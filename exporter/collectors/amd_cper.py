"""CPER records -> ``gpu_ras_events_total{afid,severity}``: every RAS event counted, none lost.

AMD GPUs log each RAS event as a CPER record (UEFI Common Platform Error Record) that amdsmi
reads with ``amdsmi_get_gpu_cper_entries(handle, severity_mask, buffer_size, cursor)`` (ROCm
6.4 on): it returns the entries, the cursor after the last one returned, the raw records and a
status, ``AMDSMI_STATUS_MORE_DATA`` while more records wait. ``amdsmi_get_afids_from_cper``
decodes a record's AMD Field IDs (AFIDs). Keeping the cursor between cycles and counting every
record is what DME's ``gpu_afid_errors`` gauge cannot do: it keeps the last event only, so two
events between scrapes lose the first. A record counts once per AFID it carries (none: once,
with ``afid=""``). Meaning (severity, action) is the AFID catalogue's business, not this one's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from exporter import catalog as c
from exporter.catalog import Sample
from exporter.collectors.amd_reader import AmdReader
from exporter.sources import amdsmi_api as api

MAX_CALLS = 50  # per GPU and cycle: 20 records a call, 1000 a cycle; the rest next cycle


class CperCounter:
    """Per physical GPU (keyed by UUID): the cursor and the counts so far."""

    def __init__(self) -> None:
        self._cursor: dict[str, int] = {}
        self._counts: dict[str, Counter[tuple[str, str]]] = {}

    def read(self, smi: api.AmdSmiApi, handle: Any, r: AmdReader, uuid: str) -> None:
        counts = self._counts.setdefault(uuid, Counter())
        for _ in range(MAX_CALLS):
            cursor = self._cursor.get(uuid, 0)
            got = r.read("cper", smi.amdsmi_get_gpu_cper_entries, handle, api.CPER_MASK_ALL,
                         4 * 1048576, cursor)  # fmt: skip
            if got is None:
                return
            entries, after, raw, status = got
            for i, record in enumerate(raw):
                severity = str(entries.get(i, {}).get("error_severity", "")).lower()
                afids = r.read("cper_afids", smi.amdsmi_get_afids_from_cper, [record])
                names = [str(a) for a in afids[0]] if afids else []
                for afid in names or [""]:
                    counts[(afid, severity)] += 1
            self._cursor[uuid] = int(after)
            if status != api.STATUS_MORE_DATA or int(after) <= cursor:
                return

    def samples(self, lv: tuple[str, ...], uuid: str) -> list[Sample]:
        return [c.GPU_RAS_EVENTS.make(n, *lv, afid, sev)
                for (afid, sev), n in sorted(self._counts.get(uuid, Counter()).items())]  # fmt: skip
