"""Interchange lines for the accounting tests, in hours from a fixed epoch so that every
expected value can be worked out by hand."""

from __future__ import annotations

from typing import Any

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
H = 3600.0


def at(hours: float) -> float:
    return T0 + hours * H


def incident(id_: str | int, **kw: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "schema": "gpuwarden.incident/v1",
        "id": id_,
        "node": "n1",
        "gpu": "0",
        "gpu_model": "H100",
        "component": "gpu",
        "fault_class": "xid_79",
        "onset": at(10),
        "detected": at(10),
        "mitigated": None,
        "returned": None,
        "gpus_out": 0,
        "jobs": [],
    }
    line.update(kw)
    return line


def job(job_id: str | int, gpus: int, interrupted: float, **kw: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "job_id": job_id,
        "gpus": gpus,
        "interrupted": interrupted,
        "resumed": None,
        "last_checkpoint": None,
    }
    line.update(kw)
    return line


def exposure(
    unit: str, node: str, gpu: str | None, start: float, end: float | None, model: str = "H100"
) -> dict[str, Any]:
    return {
        "schema": "gpuwarden.exposure/v1",
        "unit": unit,
        "node": node,
        "gpu": gpu,
        "gpu_model": model,
        "start": start,
        "end": end,
    }


def gpus(
    node: str, count: int, start: float, end: float | None, model: str = "H100"
) -> list[dict[str, Any]]:
    return [exposure(f"{node}/{i}", node, str(i), start, end, model) for i in range(count)]
