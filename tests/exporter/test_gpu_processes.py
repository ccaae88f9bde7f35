"""Shared GPUs: per-pod memory, SM time and process counts from NVML's process lists, joined to
pods through each process's cgroup and the kubelet's files on the node.

NVML is the hand-written fake; ``/proc`` and ``/var/log`` are real directory trees written the
way the kernel and the kubelet write them (cgroup files, log symlinks and pod directories).
"""

from __future__ import annotations

import os
from pathlib import Path

import pynvml
import pytest

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.gpu_processes import NOT_MIG, GpuProcessesCollector
from exporter.sources.procpods import CgroupRef, Owner, ProcPodOwners, parse_cgroup
from simulator.nvml_fake import FakeNvml, FakeProcess, hgx_node, nvml_error

UID_A = "1f0c9d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
UID_B = "2a1b3c4d-5e6f-4a7b-8c9d-e0f1a2b3c4d5"
UID_MPS = "3b2c4d5e-6f70-4b8c-9dae-f1a2b3c4d5e6"
CID = {name: (name * 64)[:64] for name in ("a", "b", "c", "d", "e", "f")}
GIB = 1 << 30


def _systemd_v2(uid: str, cid: str, qos: str = "burstable") -> str:
    u = uid.replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/"
        f"cri-containerd-{cid}.scope\n"
    )


def _cgroupfs_v1(uid: str, cid: str) -> str:
    return (
        f"12:memory:/kubepods/besteffort/pod{uid}/{cid}\n"
        f"11:cpu,cpuacct:/kubepods/besteffort/pod{uid}/{cid}\n"
        "1:name=systemd:/system.slice/containerd.service\n"
    )


class Node:
    """A node's /proc and /var/log under a temporary directory."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.log = root / "log"
        for d in (self.proc, self.log / "containers", self.log / "pods"):
            d.mkdir(parents=True)

    def process(self, pid: int, cgroup: str) -> None:
        (self.proc / str(pid)).mkdir()
        (self.proc / str(pid) / "cgroup").write_text(cgroup)

    def container(self, ns: str, pod: str, uid: str, name: str, cid: str) -> None:
        pod_dir = self.log / "pods" / f"{ns}_{pod}_{uid}"
        (pod_dir / name).mkdir(parents=True, exist_ok=True)
        (pod_dir / name / "0.log").write_text("")
        link = self.log / "containers" / f"{pod}_{ns}_{name}-{cid}.log"
        link.symlink_to(pod_dir / name / "0.log")

    def owners(self) -> ProcPodOwners:
        return ProcPodOwners(str(self.proc), str(self.log))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def _collector(nvml: FakeNvml, owners: ProcPodOwners, wall: float = 1.7e9) -> GpuProcessesCollector:
    gpus = GpuCollector(nvml, "n1")
    gpus.collect()
    return GpuProcessesCollector(nvml, gpus.identities, "n1", owners, wall=lambda: wall)


def _by_pod(samples: list[c.Sample], metric: c.MetricDef) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["gpu"], s.labels["pod"], s.labels["container"]): s.value
        for s in samples
        if s.metric is metric
    }


def _shared_node(node: Node) -> FakeNvml:
    """GPU 0 time-sliced between pods a (two processes) and b, plus a host process; GPU 1
    held by pod c alone."""
    node.container("ml", "a", UID_A, "trainer", CID["a"])
    node.container("ml", "b", UID_B, "infer", CID["b"])
    node.container("ml", "c", UID_MPS, "solo", CID["c"])
    node.process(101, _systemd_v2(UID_A, CID["a"]))
    node.process(102, _systemd_v2(UID_A, CID["a"]))
    node.process(201, _cgroupfs_v1(UID_B, CID["b"]))
    node.process(301, "0::/user.slice/user-1000.slice/session-3.scope\n")
    node.process(401, _systemd_v2(UID_MPS, CID["c"], "besteffort"))
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].processes = [
        FakeProcess(101, 2 * GIB, sm_util_pct=30),
        FakeProcess(102, 1 * GIB, sm_util_pct=10),
        FakeProcess(201, 4 * GIB, sm_util_pct=45),
        FakeProcess(301, GIB // 2, sm_util_pct=5),
    ]
    nvml.gpus[1].processes = [FakeProcess(401, 8 * GIB, sm_util_pct=90)]
    return nvml


def test_each_pod_sharing_a_time_sliced_gpu_gets_its_own_memory_and_sm_time(node: Node) -> None:
    col = _collector(_shared_node(node), node.owners())
    s = col.collect()
    assert _by_pod(s, c.GPU_POD_MEMORY_USED) == {
        ("0", "a", "trainer"): 3 * GIB,
        ("0", "b", "infer"): 4 * GIB,
        ("0", "", ""): GIB // 2,  # the host's process: unattributed, not dropped
        ("1", "c", "solo"): 8 * GIB,
        ("1", "", ""): 0,  # read, and no process outside a pod: the row says so
    }
    assert _by_pod(s, c.GPU_POD_SM_UTILIZATION) == pytest.approx(
        {
            ("0", "a", "trainer"): 0.40,
            ("0", "b", "infer"): 0.45,
            ("0", "", ""): 0.05,
            ("1", "c", "solo"): 0.90,
            ("1", "", ""): 0.0,
        }
    )
    assert _by_pod(s, c.GPU_POD_PROCESSES)[("0", "a", "trainer")] == 2
    ns = {x.labels["namespace"] for x in s if x.labels["pod"]}
    assert ns == {"ml"} and not col.read_errors.counts


def test_utilization_samples_are_counted_once_and_idle_pods_then_read_zero(node: Node) -> None:
    nvml = _shared_node(node)
    col = _collector(nvml, node.owners())
    col.collect()
    s = col.collect()  # no sample newer than the last one seen: NVML answers NOT_FOUND
    util = _by_pod(s, c.GPU_POD_SM_UTILIZATION)
    assert util[("0", "a", "trainer")] == 0.0 and util[("1", "c", "solo")] == 0.0
    nvml.gpus[0].process_sample_us += 5_000_000
    nvml.gpus[0].processes[2].sm_util_pct = 70
    util = _by_pod(col.collect(), c.GPU_POD_SM_UTILIZATION)
    assert util[("0", "b", "infer")] == pytest.approx(0.70)


def test_a_process_whose_cgroup_cannot_be_read_is_counted_and_still_served(node: Node) -> None:
    nvml = _shared_node(node)
    (node.proc / "102" / "cgroup").unlink()
    (node.proc / "102" / "cgroup").mkdir()  # reading it fails with an OSError (EISDIR)
    col = _collector(nvml, node.owners())
    s = col.collect()
    memory = _by_pod(s, c.GPU_POD_MEMORY_USED)
    assert memory[("0", "a", "trainer")] == 2 * GIB  # the readable process still counts
    assert memory[("0", "", "")] == GIB // 2 + GIB  # the unreadable one: unattributed
    assert sum(v for (g, _, _), v in memory.items() if g == "0") == 7.5 * GIB  # nothing lost
    assert col.read_errors.counts == {"process_cgroup": 1}


def test_a_process_that_exited_after_nvml_listed_it_is_no_error(node: Node) -> None:
    nvml = _shared_node(node)
    (node.proc / "201" / "cgroup").unlink()
    (node.proc / "201").rmdir()
    col = _collector(nvml, node.owners())
    memory = _by_pod(col.collect(), c.GPU_POD_MEMORY_USED)
    assert memory[("0", "", "")] == GIB // 2 + 4 * GIB and not col.read_errors.counts


def test_a_pod_process_no_kubelet_file_names_is_counted_and_a_new_container_found(
    node: Node,
) -> None:
    nvml = _shared_node(node)
    nvml.gpus[1].processes.append(FakeProcess(501, GIB, sm_util_pct=0))
    node.process(501, _systemd_v2(UID_B, CID["e"]))  # pod b's second container, no symlink yet
    node.process(601, _systemd_v2("4c3d5e6f-7081-4c9d-aebf-a2b3c4d5e6f7", CID["f"]))
    nvml.gpus[1].processes.append(FakeProcess(601, GIB, sm_util_pct=0))
    owners = node.owners()
    col = _collector(nvml, owners)
    memory = _by_pod(col.collect(), c.GPU_POD_MEMORY_USED)
    assert memory[("1", "b", "")] == GIB  # its pod from /var/log/pods, the container unknown
    assert memory[("1", "", "")] == GIB  # no file names the last pod: unattributed, counted
    assert col.read_errors.counts == {"process_pod_unknown": 1}
    node.container("ml", "b", UID_B, "sidecar", CID["e"])  # the kubelet links it now
    memory = _by_pod(col.collect(), c.GPU_POD_MEMORY_USED)
    assert memory[("1", "b", "sidecar")] == GIB


def test_under_mps_the_clients_memory_is_theirs_and_the_sm_time_is_the_servers(
    node: Node,
) -> None:
    node.container("ml", "a", UID_A, "trainer", CID["a"])
    node.container("ml", "b", UID_B, "infer", CID["b"])
    node.container("nvidia", "mps-control-daemon", UID_MPS, "mps", CID["d"])
    node.process(101, _systemd_v2(UID_A, CID["a"]))
    node.process(201, _systemd_v2(UID_B, CID["b"]))
    node.process(900, _systemd_v2(UID_MPS, CID["d"]))
    nvml = hgx_node(gpus=1)
    nvml.gpus[0].processes = [  # MPS clients have no utilization samples of their own
        FakeProcess(101, 3 * GIB, sm_util_pct=None),
        FakeProcess(201, 5 * GIB, sm_util_pct=None),
        FakeProcess(900, GIB // 4, sm_util_pct=80),  # nvidia-cuda-mps-server
    ]
    s = _collector(nvml, node.owners()).collect()
    assert _by_pod(s, c.GPU_POD_MEMORY_USED)[("0", "b", "infer")] == 5 * GIB
    util = _by_pod(s, c.GPU_POD_SM_UTILIZATION)
    assert util[("0", "mps-control-daemon", "mps")] == pytest.approx(0.8)
    assert util[("0", "a", "trainer")] == 0.0


def test_mig_processes_are_attributed_per_gpu_instance_without_utilization(node: Node) -> None:
    node.container("ml", "a", UID_A, "trainer", CID["a"])
    node.process(101, _systemd_v2(UID_A, CID["a"]))
    nvml = hgx_node(gpus=1)
    nvml.gpus[0].partition("1g.10gb", 2)
    nvml.gpus[0].processes = [FakeProcess(101, GIB, sm_util_pct=50, gpu_instance=9,
                                          compute_instance=0)]  # fmt: skip
    s = _collector(nvml, node.owners()).collect()
    mem = [x.labels for x in s if x.metric is c.GPU_POD_MEMORY_USED]
    assert [(m["gpu_instance"], m["pod"]) for m in mem if m["pod"]] == [("9", "a")]
    assert not [x for x in s if x.metric is c.GPU_POD_SM_UTILIZATION]  # unsupported: none


def test_a_gpu_whose_process_list_fails_costs_only_its_own_series(node: Node) -> None:
    nvml = _shared_node(node)
    nvml.gpus[0].failing["processes"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    col = _collector(nvml, node.owners())
    memory = _by_pod(col.collect(), c.GPU_POD_MEMORY_USED)
    assert set(memory) == {("1", "c", "solo"), ("1", "", "")}
    assert col.read_errors.counts == {"processes": 1}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (_systemd_v2(UID_A, CID["a"]), CgroupRef(UID_A, CID["a"])),
        (_cgroupfs_v1(UID_B, CID["b"]), CgroupRef(UID_B, CID["b"])),
        (  # CRI-O, guaranteed QoS (no QoS slice)
            f"0::/kubepods.slice/kubepods-pod{UID_A.replace('-', '_')}.slice/crio-{CID['c']}.scope",
            CgroupRef(UID_A, CID["c"]),
        ),
        (  # read from inside a private cgroup namespace
            f"0::/../../kubepods-besteffort-pod{UID_B.replace('-', '_')}.slice/"
            f"cri-containerd-{CID['d']}.scope",
            CgroupRef(UID_B, CID["d"]),
        ),
        ("0::/system.slice/nvidia-persistenced.service\n", None),
        ("garbage\x00\xff not a cgroup file", None),
    ],
    ids=["systemd-v2", "cgroupfs-v1", "crio-guaranteed", "cgroupns", "host", "garbage"],
)
def test_the_pod_and_container_of_a_cgroup_path_are_read_from_every_runtime_layout(
    text: str, want: CgroupRef | None
) -> None:
    assert parse_cgroup(text) == want


def test_the_kubelet_files_name_pods_whose_container_names_contain_dashes(node: Node) -> None:
    node.container("team-x", "train-7f9c-0", UID_A, "my-side-car", CID["a"])
    node.process(101, _systemd_v2(UID_A, CID["a"]))
    assert node.owners().owners([101]) == {101: Owner("team-x", "train-7f9c-0", "my-side-car")}
    assert os.path.islink(next(iter((node.log / "containers").iterdir())))


def test_the_exporter_serves_per_pod_gpu_use_when_gpu_processes_is_on(node: Node) -> None:
    from exporter.assemble import collectors_for
    from exporter.cli import settings_from
    from exporter.collection import CollectionLoop
    from exporter.sources.kmsg import ListKernelLog
    from exporter.sources.sysfs import DictSysfs

    s, _, _ = settings_from(
        ["--gpu-processes", "--proc-root", str(node.proc), "--pod-log-root", str(node.log)]
    )
    assert (s.gpu_processes, s.proc_root, s.pod_log_root) == (True, str(node.proc), str(node.log))
    assert not settings_from([])[0].gpu_processes  # off by default: it needs hostPID
    owners = ProcPodOwners(s.proc_root, s.pod_log_root)
    cols = collectors_for(
        "n1", _shared_node(node), DictSysfs(), ListKernelLog(), process_owners=owners
    )
    text = CollectionLoop(cols, "n1", source="t", interval=5).run_once().body.decode()
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith(c.GPU_POD_MEMORY_USED.name + "{") and 'pod="a"' in ln
    )
    assert 'namespace="ml",pod="a",container="trainer"} ' in line
    assert f'{c.COLLECTOR_SUCCESS.name}{{node="n1",collector="gpu_processes"}} 1' in text


RECORDED = Path(__file__).resolve().parents[2] / "fixtures/device/h200-r580-processes"


def test_the_nvml_fake_answers_process_queries_as_a_real_h200_did() -> None:
    sliced = (RECORDED / "time-sliced.txt").read_text()
    mps = (RECORDED / "mps.txt").read_text()
    # the real GPU: NOT_FOUND for "no sample newer", non-MIG processes in GPU instance 2^32-1
    assert f"PU err NVMLError_NotFound {pynvml.NVML_ERROR_NOT_FOUND}" in sliced
    assert "same ts again 0" in sliced  # asking with the newest timestamp: nothing (exclusive)
    assert all(
        ln.split()[3] == str(NOT_MIG) for ln in sliced.splitlines() if ln.startswith("proc ")
    )
    sampled = {ln.split()[1] for ln in mps.splitlines() if ln.startswith("smp ")}
    listed = {ln.split()[1] for ln in mps.splitlines() if ln.startswith("proc ")}
    clients = {ln.split()[1] for ln in mps.splitlines() if ln.startswith("mps proc ")}
    assert sampled and not sampled & clients and sampled < listed  # MPS: the server's samples
    # the fake, asked the same
    nvml = hgx_node(gpus=1)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.gpus[0].processes = [FakeProcess(568, sm_util_pct=None), FakeProcess(605, sm_util_pct=100)]
    assert [p.gpuInstanceId for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] == [NOT_MIG] * 2
    newest = nvml.nvmlDeviceGetProcessUtilization(h, 0)
    assert [s.pid for s in newest] == [605]  # an MPS client has no sample of its own
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessUtilization(h, newest[0].timeStamp)
