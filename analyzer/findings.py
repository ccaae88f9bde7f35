"""Findings: what a detector concluded, as frozen values the outputs render.

Detectors produce :class:`Finding` objects; :mod:`analyzer.engine` collects them per cycle,
:mod:`analyzer.output` turns them into ``gpuwarden_finding`` series, ``/findings`` JSON and
Alertmanager alerts. Labels and kinds follow docs/contracts.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = frozenset(
    {
        "xid_fatal",
        "xid_repeated_application",
        "xid_recurring",
        "gpu_lost",
        "ecc_uncorrectable",
        "row_remap_pending",
        "row_remap_failed",
        "sbe_rate_high",
        "nvlink_errors",
        "nvlink_down",
        "ib_errors",
        "ib_flapping",
        "ib_port_down",
        "ib_rate_low",
        "switch_degraded",
        "pcie_downgrade",
        "throttling",
        "faulty_machine",
        "straggler",
        "instance_straggler",  # one GPU instance / partition below its same-profile peers
        "workload_imbalance",
        "node_missing",
        "storage_degraded",
        "marginal",  # worst 1% of its peers, above a floor: de-prefer (action avoid)
        "fleet_shift",  # a whole peer group moved at once: one notice, nobody de-preferred
        "power_brake",
        "facility_power_brake",
        "fabric_degraded",
        "fabric_service_down",  # one node's Fabric Manager / IMEX unit not active: notify
        "domain_fabric_service_down",  # most of an NVLink domain's: one notice for the domain
        # AMD Instinct (issue 34): RAS events by AFID, XGMI links, deferred (poisoned) memory
        "afid_fatal",
        "afid_event",
        "xgmi_link_lost",
        "ras_deferred",
        # RoCE fabrics (issue 34 item 7): analyzer.detectors.roce
        "roce_pfc_storm",
        "roce_retransmits",
        "roce_congestion",
        "roce_fabric_congestion",
    }
)
SEVERITIES = ("critical", "warning", "info")
ACTIONS = ("notify", "cordon", "drain", "requeue", "checkpoint_restart", "reboot", "avoid")

# kind -> fault_class label of docs/contracts.md (alert labels, remediation ladders).
FAULT_CLASS = {
    "xid_fatal": "xid_fatal",
    "xid_repeated_application": "xid_application_repeated",
    "xid_recurring": "xid_fatal",
    "gpu_lost": "gpu_lost",
    "ecc_uncorrectable": "memory",
    "row_remap_pending": "memory",
    "row_remap_failed": "memory",
    "sbe_rate_high": "memory",
    "nvlink_errors": "nvlink",
    "nvlink_down": "nvlink",
    "ib_errors": "infiniband",
    "ib_flapping": "infiniband",
    "ib_port_down": "infiniband",
    "ib_rate_low": "infiniband",
    "switch_degraded": "switch",
    "pcie_downgrade": "pcie",
    "throttling": "thermal",
    "faulty_machine": "faulty_machine",
    "straggler": "straggler",
    "instance_straggler": "straggler",
    "workload_imbalance": "straggler",
    "node_missing": "gpu_lost",
    "storage_degraded": "storage",
    "marginal": "marginal",
    "fleet_shift": "marginal",
    "power_brake": "thermal",  # a clock slowdown, as throttling
    "facility_power_brake": "thermal",
    "fabric_degraded": "nvlink",
    "fabric_service_down": "nvlink",  # as the FabricManagerDown / ImexDown alerts
    "domain_fabric_service_down": "switch",  # as ImexDomainDown: the domain's, not a node's
    # one policy for both vendors: an AFID the catalogue calls fatal is what a fatal XID is
    "afid_fatal": "xid_fatal",
    "afid_event": "faulty_machine",
    "xgmi_link_lost": "nvlink",  # the GPU-to-GPU fabric, as NVLink (same ladder)
    "ras_deferred": "memory",
    # a RoCE port's faults are its link's, as InfiniBand's; a congested leaf is the switch's
    "roce_pfc_storm": "infiniband",
    "roce_retransmits": "infiniband",
    "roce_congestion": "infiniband",
    "roce_fabric_congestion": "switch",
}
# Kinds about shared infrastructure, not a machine: never more than notify (draining nodes
# for them is wrong), and ``node`` names the scope (``cluster``, an NVLink domain), not a node.
# A node's fabric service down is notify too: restarting a daemon, not draining a node.
NOTIFY_ONLY = frozenset(
    {
        "workload_imbalance",
        "storage_degraded",
        "fleet_shift",
        "facility_power_brake",
        "domain_fabric_service_down",
        "fabric_service_down",
        "roce_fabric_congestion",
    }
)
CLUSTER = "cluster"


@dataclass(frozen=True)
class Finding:
    node: str
    subject: str
    kind: str
    severity: str
    action: str
    detector: str
    confidence: float
    since: float
    evidence: Mapping[str, float] = field(default_factory=dict)
    summary: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")
        if self.kind in NOTIFY_ONLY and self.action != "notify":
            raise ValueError(f"{self.kind} never recommends more than notify")

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.node, self.subject, self.kind)

    @property
    def fault_class(self) -> str:
        return FAULT_CLASS.get(self.kind, "faulty_machine")

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "subject": self.subject,
            "kind": self.kind,
            "severity": self.severity,
            "action": self.action,
            "detector": self.detector,
            "confidence": round(float(self.confidence), 4),
            "since": self.since,
            "fault_class": self.fault_class,
            "evidence": {k: _num(v) for k, v in self.evidence.items()},
            "summary": self.summary,
        }


def _num(v: float) -> float | None:
    f = float(v)
    return None if f != f else round(f, 6)


def subject_labels(subject: str) -> dict[str, str]:
    """Identity labels of a subject: ``gpu=3`` -> gpu, ``link=gpu3/7`` -> gpu+link, ..."""
    kind, _, value = subject.partition("=")
    if kind == "gpu":
        return {"gpu": value}
    if kind == "link":
        g, _, link = value.partition("/")
        return {"gpu": g.removeprefix("gpu"), "link": link}
    if kind == "instance":  # a GPU instance / partition: its parent GPU and its id on it
        g, _, gi = value.partition("/")
        return {"gpu": g.removeprefix("gpu"), "gpu_instance": gi}
    if kind == "port":
        d, _, p = value.partition("/")
        return {"device": d, "port": p}
    if kind == "switch":
        return {"switch": value}
    if kind == "job":
        return {"job_id": value}
    if kind == "mount":
        return {"mount": value}
    if kind == "rack":
        return {"rack": value}
    if kind == "nvlink_domain":
        return {"nvlink_domain": value}
    if kind == "service":
        return {"service": value}
    return {}
