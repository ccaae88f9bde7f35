"""The analyzer's settings: flags > GPUWARDEN_<FIELD> environment > YAML ``--config`` file.

Read once at start by :mod:`analyzer.cli`; a bad value stops the start with one line.
The YAML file may also carry per-site XID and AFID overrides (``xid_overrides``,
``afid_overrides``), the node -> leaf
switch map (``leaf_of``) and detector parameters (``detectors``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from analyzer.sources.dialects.identity import NodeMap, load_node_map
from common.settings import SettingsError

REPLICA_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
# the plan is known by 20 % into a cycle; the marginal scores wait 30 %; a follower that waited
# in vain still reads the topology and its nodes and judges in the rest
MAX_TOPOLOGY_WAIT = 0.3


@dataclass(frozen=True)
class AnalyzerSettings:
    prometheus: str = ""
    targets: str = ""
    listen: str = "0.0.0.0:9837"
    interval: float = 15.0
    window: float = 600.0
    alertmanager: str = ""
    query_timeout: float = 30.0  # seconds per Prometheus request
    query_retries: int = 2  # extra attempts on a transient failure (5xx, timeout)
    query_parallel: int = 4  # queries in flight at once
    # gzip answers: off by default (a 1,024-node cycle reads ~10 MB, ~5 Mbit/s; compressing it
    # costs Prometheus and the analyzer CPU); on for a thin link to a remote endpoint
    query_gzip: bool = False
    resolution: float = 0.0  # query step in seconds (0: the interval)
    counter_lookback: float = 300.0  # how far before the window a cold start looks for anchors
    inventory: str = ""  # YAML inventory file (analyzer.inventory): models, fabric, racks, caps
    xid_overrides: dict[str, Any] = field(default_factory=dict)
    afid_overrides: dict[str, Any] = field(default_factory=dict)  # AMD Field IDs (afidcat)
    leaf_of: dict[str, str] = field(default_factory=dict)
    detectors: dict[str, Any] = field(default_factory=dict)
    # foreign dialects (dcgm-exporter, node_exporter: analyzer.sources.dialects): found by
    # themselves; these only say how their host names become node names, where they differ
    node_pattern: str = ""  # regex matched in full on the host name; group 1 is the node
    node_map: str = ""  # file of "host node" lines (or a YAML mapping), looked up first
    # sharded mode (analyzer.replicas): this replica's name and where the replicas meet,
    # "kubernetes:<namespace>" (Leases) or "dir:<path>" (bare metal); both empty: one process
    replica: str = ""
    membership: str = ""
    # how long a replica waits for the leader's topology of the cycle before it reads its own,
    # a fraction of the interval (analyzer.replicas.sharing); 0: every replica reads it. It
    # should outlast the leader's topology read (~2.4 s at 12,500 nodes on a 2-core server)
    topology_wait: float = 0.2

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise SettingsError(f"interval must be > 0 seconds, got {self.interval}")
        if self.window < 2 * self.interval:
            raise SettingsError(
                f"window ({self.window}s) must cover at least two intervals ({self.interval}s)"
            )
        if not self.query_timeout > 0:
            raise SettingsError(f"query_timeout must be > 0 seconds, got {self.query_timeout}")
        if not 0 <= self.query_retries <= 10:
            raise SettingsError(f"query_retries must be 0..10, got {self.query_retries}")
        if not 1 <= self.query_parallel <= 64:
            raise SettingsError(f"query_parallel must be 1..64, got {self.query_parallel}")
        if self.resolution < 0 or self.counter_lookback < 0:
            raise SettingsError("resolution and counter_lookback must be >= 0 seconds")
        if self.window < 2 * self.step:
            raise SettingsError(
                f"window ({self.window}s) must cover at least two query steps ({self.step}s)"
            )
        _host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(f"listen must be HOST:PORT, got {self.listen!r}")
        for name in ("prometheus", "alertmanager"):
            url = getattr(self, name)
            if url and not url.startswith(("http://", "https://")):
                raise SettingsError(f"{name} must be an http(s) URL, got {url!r}")
        if not self.prometheus and not self.targets:
            raise SettingsError(
                "give --prometheus URL, or --targets FILE_SD for the embedded scrape"
            )
        for what in ("xid_overrides", "afid_overrides", "leaf_of", "detectors"):
            if not isinstance(getattr(self, what), dict):
                raise SettingsError(f"{what} must be a mapping")
        for k in self.xid_overrides:
            if not str(k).isdigit():
                raise SettingsError(f"xid_overrides: {k!r} is not an XID number")
        for k in self.afid_overrides:
            if not str(k).isdigit():
                raise SettingsError(f"afid_overrides: {k!r} is not an AFID number")
        self.nodes()  # a bad pattern or map stops the start, not the first foreign series
        if not 0 <= self.topology_wait <= MAX_TOPOLOGY_WAIT:
            raise SettingsError(
                f"topology_wait must be 0..{MAX_TOPOLOGY_WAIT} (a fraction of the interval: "
                f"the cycle's read and judgement come after it), got {self.topology_wait}"
            )
        self._check_replicas()

    def _check_replicas(self) -> None:
        if not self.replica and not self.membership:
            return
        if not self.replica or not self.membership:
            raise SettingsError("replica and membership go together (the sharded mode)")
        if not REPLICA_NAME.fullmatch(self.replica):
            raise SettingsError(
                f"replica must be a DNS label of at most 40 characters (a-z, 0-9, '-'; it "
                f"names a Lease), got {self.replica!r}"
            )
        kind, _, where = self.membership.partition(":")
        if kind not in ("kubernetes", "dir") or not where:
            raise SettingsError(
                f"membership must be kubernetes:<namespace> or dir:<path>, got {self.membership!r}"
            )
        if kind == "kubernetes" and not REPLICA_NAME.fullmatch(where):
            raise SettingsError(f"membership: {where!r} is not a namespace name")
        if not self.prometheus:
            raise SettingsError(
                "the sharded mode reads a shared Prometheus-compatible API: give --prometheus URL"
            )
        if self.interval < 5:
            raise SettingsError(
                f"the sharded mode needs an interval of at least 5 s (got {self.interval}): "
                "replicas agree on a plan within each cycle over the network"
            )

    def nodes(self) -> NodeMap:
        """The site's host name -> node name mapping for foreign dialects."""
        try:
            names = load_node_map(self.node_map) if self.node_map else {}
            return NodeMap(self.node_pattern, names)
        except (OSError, ValueError) as e:
            raise SettingsError(f"node identity: {e}") from None

    @property
    def step(self) -> float:
        """The query grid's step: ``resolution``, or the interval when it is 0."""
        return self.resolution or self.interval

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host or "0.0.0.0", int(port)

    def detector_config(self) -> dict[str, Any]:
        return {**self.detectors, "xid_overrides": self.xid_overrides,
                "afid_overrides": self.afid_overrides}  # fmt: skip
