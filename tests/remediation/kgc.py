"""The garbage collector's part, for the emulator (kmock has none): deleting a Job also
deletes its pods, as the real kube-controller-manager's garbage collector does after a
``propagationPolicy: Background`` delete. The real collector, and its delay, are exercised on
the real control plane (tests/kube); this stand-in only keeps the emulator's unit tests of
the service's error paths from waiting for a collector that does not exist."""

from __future__ import annotations

from typing import Any

import aiohttp.web
import kmock

PODS = kmock.resource("v1/pods")


def collect_garbage(e: kmock.KubernetesEmulator) -> list[str]:
    """Delete every pod whose ``job-name`` Job no longer exists; the names deleted."""
    live = [k for k in list(e.objects) if not e.objects[k].deleted]
    jobs = {(ns, name) for (res, ns, name) in live if res.plural == "jobs"}
    gone = []
    for key in live:
        res, ns, name = key
        if res.plural != "pods":
            continue
        owner = ((e.objects[key].get("metadata") or {}).get("labels") or {}).get("job-name")
        if owner and (ns, owner) not in jobs:
            e.objects[key].delete()  # soft: its history stays for assertions
            gone.append(name)
    return gone


class CollectingEmulator(kmock.KubernetesEmulator):
    """The emulator with the garbage collector running right after each Job delete."""

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        try:
            return await super()._handle(request)
        finally:
            if request.resource is not None and request.resource.plural == "jobs":
                collect_garbage(self)
