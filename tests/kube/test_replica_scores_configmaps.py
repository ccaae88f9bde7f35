"""The marginal scores exchange on the real kube-apiserver: a ConfigMap per replica. What only
a real server shows: the largest blob gpuwarden lets through is one the server accepts (its
1 MiB ConfigMap limit, base64 included), a refusal arrives as the replica's OSError with the
server's status (the cycle goes on, marginal on its part alone), and the scores read back bit
for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest

from analyzer.detectors.marginal import Scores
from analyzer.replicas.configmaps import MAX_BLOB, ConfigMapExchange
from analyzer.replicas.exchange import decode, encode
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real


def _exchange(lab: KubeLab, ns: str | None = None, token: str | None = None) -> ConfigMapExchange:
    import kubernetes

    return ConfigMapExchange(kubernetes.client.CoreV1Api(lab.client(token)), ns or lab.namespace())


def _scores(seed: int) -> Scores:
    rng = np.random.default_rng(seed)
    vals = rng.normal(size=50)
    return Scores(
        values={("whole", "sm_clock", "H100"): vals},
        sizes={"H100": 50},
        names={("whole", "sm_clock", "H100"): tuple(f"n{seed}-{i}" for i in range(50))},
    )


def test_three_replicas_read_each_others_scores_of_a_cycle_bit_for_bit(kube_lab: KubeLab) -> None:
    x = _exchange(kube_lab)
    sent = {f"r-{i}": _scores(i) for i in range(3)}
    for r, s in sent.items():
        x.put(7, r, encode(s))
    got = x.get(7)
    assert set(got) == set(sent)
    for r, s in sent.items():
        back = decode(got[r])
        k = ("whole", "sm_clock", "H100")
        assert back.values[k].tobytes() == s.values[k].tobytes() and back.names == s.names
    x.put(8, "r-0", encode(sent["r-0"]))  # r-0 moved on: its blob is not cycle 7's any more
    assert set(x.get(7)) == {"r-1", "r-2"} and set(x.get(8)) == {"r-0"}
    assert x.get(6) == {}


def test_the_largest_blob_let_through_is_one_the_server_accepts(kube_lab: KubeLab) -> None:
    x = _exchange(kube_lab)
    biggest = os.urandom(MAX_BLOB)  # incompressible: as large on the wire as it gets
    x.put(1, "r-big", biggest)
    assert x.get(1)["r-big"] == biggest
    with pytest.raises(OSError, match=r"more than a ConfigMap holds"):
        x.put(2, "r-big", biggest + b"x")
    assert x.get(1)["r-big"] == biggest  # the refused one changed nothing


def _unprivileged(kube_lab: KubeLab, prefix: str) -> ConfigMapExchange:
    """An exchange as a ServiceAccount the RBAC grants nothing, in a namespace of its own."""
    ns = kube_lab.namespace(prefix)
    kube_lab.apply_yaml([{"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": "nobody", "namespace": ns}}])  # fmt: skip
    return _exchange(kube_lab, ns, kube_lab.service_account_token(ns, "nobody"))


def test_a_refusal_is_an_oserror_with_the_servers_status(kube_lab: KubeLab) -> None:
    x = _unprivileged(kube_lab, "noperm")
    with pytest.raises(OSError, match=r"leaving the marginal scores: HTTP 403"):
        x.put(1, "r-0", b"blob")
    with pytest.raises(OSError, match=r"reading the marginal scores: HTTP 403"):
        x.get(1)
    with pytest.raises(OSError, match=r"removing the marginal scores: HTTP 403"):
        x.leave("r-0")


def test_a_replica_leaving_takes_its_scores_and_leaving_twice_is_fine(kube_lab: KubeLab) -> None:
    x = _exchange(kube_lab)
    x.put(3, "r-0", b"a")
    x.put(3, "r-1", b"b")
    x.leave("r-0")
    x.leave("r-0")
    assert x.get(3) == {"r-1": b"b"}


def test_a_configmap_not_of_gpuwarden_shape_is_not_read_as_scores(kube_lab: KubeLab) -> None:
    x = _exchange(kube_lab)
    x.put(4, "r-0", b"ok")
    kube_lab.apply_yaml([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "odd-1", "namespace": x.namespace, "labels": {"gpuwarden.io/role": "scores"},
            "annotations": {"gpuwarden.io/cycle": "4"}}, "binaryData": {"scores": "YQ=="}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "odd-2", "namespace": x.namespace, "labels": {"gpuwarden.io/role": "scores"},
            "annotations": {"gpuwarden.io/cycle": "4", "gpuwarden.io/replica": "r-9"}},
         "data": {"scores": "text, not binary"}},
    ])  # fmt: skip
    assert x.get(4) == {"r-0": b"ok"}


def test_the_leaders_topology_is_one_configmap_read_back_for_its_cycle_only(
    kube_lab: KubeLab,
) -> None:
    from analyzer.replicas.topoblob import decode as decode_topology
    from analyzer.replicas.topoblob import encode as encode_topology
    from analyzer.sources.topology import Topology, topology_window

    names = [f"node-{i:02d}" for i in range(20)]
    grid = 6000.0 - 15.0 * np.arange(40, -1, -1)
    w = topology_window(grid, 15.0, names, [(n, "j1") for n in names[:8]],
                        [(n, "cl-0", "1") for n in names[8:]], {})  # fmt: skip
    topo = Topology(w, {"dcgm-exporter": frozenset({"Hostname"})})
    x = _exchange(kube_lab)
    x.put(5, "r-0", b"scores")
    x.put_topology(5, encode_topology(5, topo))
    blob = x.get_topology(5)
    assert blob is not None
    cycle, back = decode_topology(blob)
    assert cycle == 5 and back.window.nodes == w.nodes and back.window.jobs == w.jobs
    assert (
        back.window.nvlink_domain_of == w.nvlink_domain_of and back.host_labels == topo.host_labels
    )
    assert back.window.t.tobytes() == grid.tobytes()
    x.put_topology(6, b"cycle 6")  # the next leader's replaces it: cycle 5's is gone
    assert x.get_topology(5) is None and x.get_topology(6) == b"cycle 6"
    assert x.get(5) == {"r-0": b"scores"}  # the topology is never read as a replica's scores


def test_a_refused_topology_is_an_oserror_with_the_servers_status(kube_lab: KubeLab) -> None:
    x = _unprivileged(kube_lab, "notopo")
    with pytest.raises(OSError, match=r"leaving the topology: HTTP 403"):
        x.put_topology(1, b"blob")
    with pytest.raises(OSError, match=r"reading the topology: HTTP 403"):
        x.get_topology(1)


def test_detector_memory_is_a_configmap_per_replica_that_outlives_its_replica(
    kube_lab: KubeLab,
) -> None:
    from analyzer.replicas.exchange import KEEP_CYCLES, decode_memory, encode_memory

    x = _exchange(kube_lab)
    for r in ("r-0", "r-1"):
        x.put_memory(20, r, encode_memory([f"{r}-n1"], {"xid": {"watermark": {f"{r}-n1": 1.5}}}))
    got = x.get_memory(20)
    assert set(got) == {"r-0", "r-1"}
    assert decode_memory(got["r-0"])["memory"]["xid"]["watermark"] == {"r-0-n1": 1.5}
    x.put(20, "r-0", b"scores")
    x.leave("r-0")  # its scores go, its memory stays for whoever takes its nodes over
    assert x.get(20) == {} and set(x.get_memory(20)) == {"r-0", "r-1"}
    x.put_memory(21, "r-1", encode_memory([], {}))
    assert set(x.get_memory(21)) == {"r-1"} and set(x.get_memory(20)) == {"r-0"}
    # a departed replica's memory is removed once old, by whoever reads the board then
    x.get_memory(20 + KEEP_CYCLES + 1)
    assert x.get_memory(20) == {} and set(x.get_memory(21)) == {"r-1"}


def test_a_refused_memory_is_an_oserror_with_the_servers_status(kube_lab: KubeLab) -> None:
    x = _unprivileged(kube_lab, "nomem")
    with pytest.raises(OSError, match=r"leaving the detector memory: HTTP 403"):
        x.put_memory(1, "r-0", b"blob")
    with pytest.raises(OSError, match=r"reading the detector memory: HTTP 403"):
        x.get_memory(1)
    with pytest.raises(OSError, match=r"more than a ConfigMap holds"):
        _exchange(kube_lab).put_memory(1, "r-0", os.urandom(MAX_BLOB + 1))
