"""The list of dashboards: one module per dashboard, each with ``UID`` and ``build()``."""

from __future__ import annotations

from types import ModuleType

from dashboards import fabric, fleet, gpu, node, pipeline, reliability, remediation, xid_memory

MODULES: tuple[ModuleType, ...] = (
    fleet,
    node,
    gpu,
    fabric,
    xid_memory,
    remediation,
    pipeline,
    reliability,
)
