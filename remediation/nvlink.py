"""NVLink-domain alerts (``scope="domain"``, alerts/fabric.rules.yml): a domain whose fabric
or IMEX is down is one incident with one action (a notification), never its nodes drained one
by one. A node's domain is its ``nvlink_domain`` failure domain: the topology file's
``nvlink_domain``, ``topology.gpuwarden.io/nvlink_domain`` or GFD's ``nvidia.com/gpu.clique``
node label (:func:`common.fabric.from_labels`). Pure: labels in, names and reasons out."""

from __future__ import annotations

from collections.abc import Mapping

DOMAIN_KIND = "nvlink_domain"  # the failure-domain kind (topology, node labels)
INCIDENT_CLASS = "nvlink_domain"  # the cluster incident's fault_class; its subject: the domain


def domain_of(labels: Mapping[str, str]) -> str:
    """The NVLink domain a domain-scope alert is about; "" for any other alert."""
    if labels.get("scope") != "domain":
        return ""
    return str(labels.get(DOMAIN_KIND, "")).strip()


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
