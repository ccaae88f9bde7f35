"""NVLink-domain alerts (``scope="domain"``, alerts/fabric.rules.yml): a domain whose fabric
or IMEX is down is one incident with one action (a notification), never its nodes drained one
by one.

A node's domain is, in this order: its ``nvlink_domain`` failure domain (the topology file's
``nvlink_domain``, ``topology.gpuwarden.io/nvlink_domain`` or GFD's ``nvidia.com/gpu.clique``
node label: :func:`common.fabric.from_labels`); the ``nvlink_domain`` label of the alert itself
(the NVLink, fabric and link-class XID rules join it from ``gpuwarden_gpu_fabric_info``'s
cluster UUID and clique id, so a Slurm site with no topology entries still knows it); or what
an earlier alert of the node said (remembered in the journal under :data:`MEMBER_KEY`).

A switch tray down shows on every tray of the rack before the domain alert arrives (it waits
5 minutes, ``for: 5m``; link XIDs fire at once): a disruptive action for an NVLink-class alert
(:func:`link_class`) on a node of a multi-node domain is held for :data:`SETTLE_S` after the
alert arrived, so the domain alert can arrive and hold it as part of the domain's incident; a
fault of the node alone is decided again when the window has passed. Pure: labels in, names
and reasons out."""

from __future__ import annotations

from collections.abc import Mapping

DOMAIN_KIND = "nvlink_domain"  # the failure-domain kind (topology, node labels)
INCIDENT_CLASS = "nvlink_domain"  # the cluster incident's fault_class; its subject: the domain
MEMBER_KEY = "nvlink_domain_of:"  # journal kv key prefix: node -> domain learned from alerts
SETTLE_GUARD = "domain_settle"  # the guard of a decision held for the settle window
SETTLING_KEY = "nvlink_settling"  # journal kv: {alert key: end of its settle window}
# NvlinkDomainFabricDegraded's `for: 5m`, Alertmanager's group_wait (10 s) and group_interval
# (1 min) on the remediation route, and a scrape or two of slack.
SETTLE_S = 420.0


def domain_of(labels: Mapping[str, str]) -> str:
    """The NVLink domain a domain-scope alert is about; "" for any other alert."""
    if labels.get("scope") != "domain":
        return ""
    return str(labels.get(DOMAIN_KIND, "")).strip()


def node_domain(labels: Mapping[str, str]) -> str:
    """The NVLink domain a node alert names for its node (``nvlink_domain``); "" if none."""
    if labels.get("scope") == "domain":
        return ""
    dom = str(labels.get(DOMAIN_KIND, "")).strip()
    return dom if len(dom) <= 128 and not dom.startswith(".") else ""


def link_class(labels: Mapping[str, str]) -> bool:
    """An alert a domain-wide NVLink fault raises on every node of the domain: NVLink and
    fabric alerts (``fault_class="nvlink"``) and link-class XIDs (``xid_class="link"``)."""
    return labels.get("fault_class") == "nvlink" or labels.get("xid_class") == "link"


def settle_reason(action: str, dom: str, left: float) -> str:
    return (
        f"{action} held {left:.0f}s more: an NVLink alert on a node of multi-node NVLink domain "
        f"{dom}; a domain-wide fault (a switch tray) pages as one domain alert within "
        f"{SETTLE_S:.0f}s, so the node is decided again when that window has passed"
    )


def alert_reason(status: str, labels: Mapping[str, str], incident: int | None, still: bool) -> str:
    dom, name = domain_of(labels), labels.get("alertname", "domain alert")
    ref = f" (incident #{incident})" if incident is not None else ""
    if status == "firing":
        return (
            f"{name}: NVLink domain {dom} down{ref}; one incident, notify only; "
            "drains, cordons, reboots and resets of its nodes are held while it fires"
        )
    if still:
        return f"{name} resolved; NVLink domain {dom} still down by another alert{ref}"
    return f"{name} resolved: NVLink domain {dom} recovered{ref}; its nodes are decided again"
