"""Which node a foreign series belongs to: the analyzer's ``node`` identity for other exporters.

Pure. dcgm-exporter labels its series ``Hostname`` (3.x, 4.0 to 4.8) or ``hostname`` (from
NVIDIA/dcgm-exporter commit d5e5f51, "Rename Hostname label to hostname"); node_exporter sets
none (Prometheus adds ``instance``, ``host:port``). The first of ``node``, ``Hostname``,
``hostname`` and the host part of ``instance`` that is set names the node; a site whose host
names differ from its scheduler's node names gives a mapping, checked at start-up
(:class:`NodeMap`): a regex whose first group is the node, and/or a file of ``name: node``
lines. Names the mapping does not cover pass through unchanged. A replica selects its nodes'
series by the host names mapped to them (:func:`identity_matchers`; under a pattern, the
pattern around its nodes: :mod:`.hostpattern`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from analyzer.sources.dialects import hostpattern
from analyzer.sources.queries import regex_literal

# the labels, in order of precedence, that may name a foreign series' node
IDENTITY_LABELS = ("node", "Hostname", "hostname", "instance")


def host_of(instance: str) -> str:
    """``gpu-07.example:9400`` -> ``gpu-07.example``; ``[fe80::1]:9100`` -> ``fe80::1``."""
    if instance.startswith("["):
        return instance[1 : instance.find("]")] if "]" in instance else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


def raw_identity(labels: Mapping[str, str]) -> str:
    """The node name a series' own labels give (before any site mapping); "" when none."""
    for name in IDENTITY_LABELS[:3]:
        v = labels.get(name)
        if v:
            return v
    inst = labels.get("instance", "")
    return host_of(inst) if inst else ""


def identity_label(labels: Mapping[str, str]) -> str:
    """The label :func:`raw_identity` takes a series' host from ("" when none)."""
    for name in IDENTITY_LABELS:
        if labels.get(name):
            return name
    return ""


@dataclass(frozen=True, eq=False)
class NodeMap:
    """A site's mapping from foreign host names to node names: ``names`` first (exact), then
    ``pattern`` (a regex matched in full whose first group is the node)."""

    pattern: str = ""
    names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pattern:
            try:
                rx = re.compile(self.pattern)
            except re.error as e:
                raise ValueError(f"node_pattern {self.pattern!r}: {e}") from None
            if rx.groups < 1:
                raise ValueError(f"node_pattern {self.pattern!r} needs a group: the node name")
            object.__setattr__(self, "_rx", rx)
            object.__setattr__(self, "_split", hostpattern.split(self.pattern))
        for k, v in self.names.items():
            if not isinstance(k, str) or not isinstance(v, str) or not k or not v:
                raise ValueError(f"node_map: {k!r}: {v!r} is not a pair of non-empty names")

    @property
    def invertible(self) -> bool:
        """Whether the host names of given nodes can be listed (a pattern's cannot)."""
        return not self.pattern

    @property
    def selectable(self) -> bool:
        """Whether the host names of given nodes can be selected on the server: listed, or
        matched by the pattern around them (:func:`.hostpattern.split`)."""
        return not self.pattern or getattr(self, "_split", None) is not None

    def raw_names(self, nodes: Iterable[str]) -> frozenset[str] | None:
        """The host names this mapping turns into one of ``nodes`` (the names mapped to them
        and the nodes that pass through unchanged); None where a pattern maps names (its
        inverse is no list of names)."""
        if self.pattern:
            return None
        return self._listed(nodes)

    def _listed(self, nodes: Iterable[str]) -> frozenset[str]:
        want = set(nodes)
        return frozenset({k for k, v in self.names.items() if v in want} | (want - set(self.names)))

    def raw_regex(self, nodes: Iterable[str]) -> str | None:
        """A regex (Python's and RE2's alike, to match in full) selecting a superset of the
        host names this mapping turns into one of ``nodes``: those :meth:`raw_names` lists, or
        matched by the pattern with ``nodes`` for its group; None where the pattern gives no
        such regex (:attr:`selectable`) or no node is given."""
        want = sorted(set(nodes))
        listed = sorted(self._listed(want))
        alts = [hostpattern.literal(n) for n in listed]
        if self.pattern:
            parts: tuple[str, str] | None = getattr(self, "_split", None)
            if parts is None or not want:
                return None
            alts.append(hostpattern.fill(parts, want))
        return "|".join(alts) if alts else None

    def __call__(self, name: str) -> str:
        got = self.names.get(name)
        if got is not None:
            return got
        rx: re.Pattern[str] | None = getattr(self, "_rx", None)
        if rx is not None and (m := rx.fullmatch(name)) and m.group(1):
            return m.group(1)
        return name


def identity_matchers(labels: Iterable[str], nodes: Iterable[str],
                      node_map: NodeMap | None = None) -> list[str] | None:  # fmt: skip
    """Matchers on a foreign series' own labels selecting the series of ``nodes``: one per
    identity label among ``labels`` (those a dialect's query keeps), each an alternation of
    the host names (``instance``: with any port, or in brackets), to be or-ed. Together a
    superset: a series naming an owned host in one label and another node in a label of
    higher precedence is selected too (the reader narrows by the relabelled ``node``); an
    exact set would need ``Hostname=""``-style matchers, each of which Prometheus answers by
    walking every value of the label. Under a pattern, the alternation also holds the
    pattern with ``nodes`` for its group (:meth:`NodeMap.raw_regex`), a superset too. None
    where the node map's pattern gives no such regex: the family is read whole."""
    nodes = tuple(nodes)
    m = node_map or NodeMap()
    names = m.raw_names(nodes)
    if names is not None:
        alt = "|".join(regex_literal(n) for n in sorted(names or nodes))
    else:
        rx = m.raw_regex(nodes)
        if rx is None:
            return None
        alt = rx.replace("\\", "\\\\").replace('"', '\\"')  # as a PromQL string
    out = []
    for label in IDENTITY_LABELS:
        if label not in labels:
            continue
        if label == "instance":  # host_of: "host", "host:port", "[v6]", "[v6]:port"
            out.append(f'instance=~"(?:{alt})(?::[0-9]+)?|\\\\[(?:{alt})\\\\].*"')
        else:
            out.append(f'{label}=~"{alt}"')
    return out


def load_node_map(path: str) -> dict[str, str]:
    """A ``name: node`` file (YAML mapping, or one ``name node`` / ``name: node`` per line)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict):
        return {str(k): str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for i, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(":", " ").split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{i}: want 'name node', got {line!r}")
        out[parts[0]] = parts[1]
    return out
