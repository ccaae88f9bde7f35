"""The Kubernetes manifests: schema-valid, wired together, and no more privileged than needed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.support import CONTRACT_FLAGS, KUBE, ROOT, build

BASE = KUBE / "base"
OVERLAYS = sorted(p.parent for p in (KUBE / "overlays").glob("*/kustomization.yaml"))
KUBERNETES_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}
IMAGE = "ghcr.io/gpuwarden/gpuwarden"
SNR = "self-node-remediation.medik8s.io"
DRA = "resource.k8s.io"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return build(BASE)


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} documents"
    return hits[0]


def of_kind(docs: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in kinds]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"])


def container(doc: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(doc)["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def flags(c: dict[str, Any]) -> dict[str, str]:
    out = {}
    for arg in c["args"]:
        assert arg.startswith("--") and "=" in arg, f"use --flag=value form: {arg!r}"
        key, _, value = arg.partition("=")
        out[key] = value
    return out


@pytest.mark.parametrize("kdir", [BASE, *OVERLAYS], ids=lambda p: p.relative_to(KUBE).as_posix())
def test_every_built_manifest_validates_against_the_strict_kubernetes_schema(kdir: Path) -> None:
    built = build(kdir)
    core = [d for d in built if d["kind"] not in CRD_KINDS]
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    want = {"Deployment", "Service", "ClusterRole"} | ({"DaemonSet"} - variant_overlay(kdir))
    assert {d["kind"] for d in core} >= want


# another exporter's variant overlay -> its key (alerts/<key>/, dashboards/json/<key>/)
VARIANT_OVERLAYS = {"dcgm-exporter": "dcgm", "amd-device-metrics-exporter": "amd"}


def variant_overlay(kdir: Path) -> set[str]:
    """{"DaemonSet"} for an exporter variant's overlay (it ships no exporter), else nothing."""
    return {"DaemonSet"} if kdir.name in VARIANT_OVERLAYS else set()


def test_every_manifest_file_is_part_of_a_kustomization_build() -> None:
    listed: set[Path] = set()
    for kfile in KUBE.rglob("kustomization.yaml"):
        for entry in yaml.safe_load(kfile.read_text()).get("resources", []):
            listed.add((kfile.parent / entry).resolve())
    files = {p.resolve() for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files - listed == set(), "manifests no kustomization includes (never validated)"


def test_names_are_unique_and_namespaced_objects_live_in_gpuwarden(docs: list[dict]) -> None:
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys))
    for d in docs:
        if d["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert d["metadata"]["namespace"] == "gpuwarden", d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpuwarden"


def test_workload_selectors_match_their_pod_template_labels(docs: list[dict]) -> None:
    for d in of_kind(docs, "Deployment", "DaemonSet"):
        selector = d["spec"]["selector"]["matchLabels"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), d["metadata"]["name"]


def test_each_service_selects_one_workload_and_targets_a_named_container_port(
    docs: list[dict],
) -> None:
    workloads = of_kind(docs, "Deployment", "DaemonSet")
    for svc in of_kind(docs, "Service"):
        sel = svc["spec"]["selector"]
        matched = [
            w
            for w in workloads
            if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, svc["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for p in container(matched[0])["ports"]}
        for port in svc["spec"]["ports"]:
            assert ports[port["targetPort"]] == port["port"]


def test_each_servicemonitor_selects_a_service_in_its_namespace_by_port_name(
    docs: list[dict],
) -> None:
    services = of_kind(docs, "Service")
    monitors = of_kind(docs, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {
        "gpuwarden-exporter", "gpuwarden-analyzer", "gpuwarden-remediation",
    }  # fmt: skip
    for sm in monitors:
        sel = sm["spec"]["selector"]["matchLabels"]
        matched = [
            s
            for s in services
            if sel.items() <= s["metadata"]["labels"].items()
            and s["metadata"]["namespace"] == sm["metadata"]["namespace"]
        ]
        assert len(matched) == 1, sm["metadata"]["name"]
        # job label = the Service name, the job names the alerts and bare-metal config use.
        job = matched[0]["metadata"]["labels"][sm["spec"]["jobLabel"]]
        assert job == matched[0]["metadata"]["name"] == sm["metadata"]["name"]
        port_names = {p["name"] for p in matched[0]["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            assert ep["port"] in port_names and ep["path"] == "/metrics"


def test_probes_hit_a_declared_port_and_readiness_is_healthz(docs: list[dict]) -> None:
    for w in of_kind(docs, "Deployment", "DaemonSet"):
        c = container(w)
        names = {p["name"] for p in c["ports"]}
        assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in c:
                assert c[probe]["httpGet"]["port"] in names


def test_the_analyzer_is_not_restarted_while_prometheus_is_unreachable(docs: list[dict]) -> None:
    # its /healthz fails without a good query cycle: readiness only; liveness asks /metrics
    c = container(one(docs, "Deployment", "gpuwarden-analyzer"))
    assert c["livenessProbe"]["httpGet"]["path"] == "/metrics"
    assert c["startupProbe"]["httpGet"]["path"] == "/metrics"
    assert "initialDelaySeconds" not in c["livenessProbe"]  # the startupProbe covers start-up
    assert "startupProbe" in container(one(docs, "Deployment", "gpuwarden-remediation"))


def test_volumes_mounts_and_referenced_objects_all_exist(docs: list[dict]) -> None:
    configmaps = {d["metadata"]["name"]: d for d in of_kind(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in of_kind(docs, "PersistentVolumeClaim")}
    documented = (BASE / "remediation.yaml").read_text()
    for w in of_kind(docs, "Deployment", "DaemonSet"):
        volumes = {v["name"]: v for v in pod_spec(w)["volumes"]}
        mounted = {m["name"] for m in container(w)["volumeMounts"]}
        assert mounted == set(volumes), w["metadata"]["name"]
        for v in volumes.values():
            if "configMap" in v:
                assert v["configMap"]["name"] in configmaps
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims
            if "secret" in v:  # created by the operator; the command is in the file's header
                assert f"create secret generic {v['secret']['secretName']}" in documented


def test_container_args_use_only_contract_flags_and_the_shipped_image(docs: list[dict]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for w in of_kind(docs, "Deployment", "DaemonSet"):
        c = container(w)
        (entry,) = c["command"]
        assert set(flags(c)) <= CONTRACT_FLAGS[entry], entry
        assert c["image"] == f"{IMAGE}:{version}"


def mount_path(c: dict[str, Any], volume: str) -> str:
    (path,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume]
    return str(path)


def test_exporter_runs_on_gpu_nodes_with_host_sys_kmsg_and_nvml_but_no_gpu(docs: list) -> None:
    ds = one(docs, "DaemonSet", "gpuwarden-exporter")
    spec, c = pod_spec(ds), container(ds)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert {"operator": "Exists"} in spec["tolerations"]  # tainted nodes stay observed
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "system-node-critical"  # scheduled on full nodes too
    env = {e["name"]: e for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    f = flags(c)
    assert f["--node"] == "$(NODE_NAME)" and f["--source"] == "nvml"
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    sys_mount = mounts[f["--sysfs-root"]]
    assert volumes[sys_mount["name"]]["hostPath"]["path"] == "/sys" and sys_mount["readOnly"]
    kmsg = mounts[f["--kmsg"]]
    assert volumes[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert kmsg["readOnly"]
    assert not any("nvidia.com/gpu" in r for r in c["resources"].values())
    assert c["resources"]["limits"]["memory"] in {"96Mi", "128Mi", "160Mi", "192Mi"}


def test_exporter_has_only_cap_syslog_and_no_host_namespaces_or_api_token(docs: list) -> None:
    ds = one(docs, "DaemonSet", "gpuwarden-exporter")
    spec, sc = pod_spec(ds), container(ds)["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("name", ["gpuwarden-analyzer", "gpuwarden-remediation"])
def test_analyzer_and_remediation_meet_the_restricted_pod_security_standard(
    docs: list, name: str
) -> None:
    d = one(docs, "Deployment", name)
    spec, sc = pod_spec(d), container(d)["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert not any(v.get("hostPath") for v in spec["volumes"])
    assert "memory" in container(d)["resources"]["limits"]


def test_analyzer_queries_prometheus_and_needs_no_api_token(docs: list) -> None:
    d = one(docs, "Deployment", "gpuwarden-analyzer")
    assert re.fullmatch(r"https?://[^/]+(/.*)?", flags(container(d))["--prometheus"])
    assert pod_spec(d)["automountServiceAccountToken"] is False
    assert d["spec"]["replicas"] == 1  # two would export every finding twice


def test_remediation_is_one_recreated_replica_with_state_on_a_volume(docs: list) -> None:
    d = one(docs, "Deployment", "gpuwarden-remediation")
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"] == {"type": "Recreate"}
    # Reschedule within a minute or two of its node dying, not the default five.
    waits = {t["key"]: t["tolerationSeconds"] for t in pod_spec(d)["tolerations"]}
    assert waits.keys() == {"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}
    assert max(waits.values()) <= 120
    c = container(d)
    f = flags(c)
    assert f["--backend"] == "kubernetes"
    volumes = {v["name"]: v for v in pod_spec(d)["volumes"]}
    state = Path(f["--state-db"])
    assert str(state.parent) == mount_path(c, "state")
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "gpuwarden-remediation-state"
    claim = one(docs, "PersistentVolumeClaim", "gpuwarden-remediation-state")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    token = Path(f["--webhook-token-file"])
    assert str(token.parent) == mount_path(c, "webhook-token") and token.name == "token"
    policy = Path(f["--policy"])
    assert str(policy.parent) == mount_path(c, "policy")
    cm = one(docs, "ConfigMap", volumes["policy"]["configMap"]["name"])
    assert policy.name in cm["data"]
    assert not any(a.startswith("--webhook-token=") for a in c["args"])  # never on the cmdline


def rbac_grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_remediation_rbac_grants_exactly_what_its_kubernetes_backend_needs(docs: list) -> None:
    role = one(docs, "ClusterRole", "gpuwarden-remediation")
    assert rbac_grants(role) == {
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "patch"),
        ("", "pods", "get"), ("", "pods", "list"),
        ("", "pods/eviction", "create"),
        # reboot: medik8s Self Node Remediation (remediation/backends/noderemediation.py)
        (SNR, "selfnoderemediationtemplates", "list"),
        (SNR, "selfnoderemediations", "list"), (SNR, "selfnoderemediations", "create"),
        (SNR, "selfnoderemediations", "delete"),
        # one-GPU isolation: DRA device taints (remediation/backends/dra.py)
        (DRA, "resourceslices", "list"), (DRA, "resourceclaims", "list"),
        (DRA, "devicetaintrules", "list"), (DRA, "devicetaintrules", "create"),
        (DRA, "devicetaintrules", "get"), (DRA, "devicetaintrules", "patch"),
        (DRA, "devicetaintrules", "delete"),
        # node health (remediation/backends/nodehealth.py): conditions and Events
        ("", "nodes/status", "patch"), ("", "events", "create"), ("", "events", "patch"),
    }  # fmt: skip
    assert not any("resourceNames" in r or "nonResourceURLs" in r for r in role["rules"])
    # pod patch (the checkpoint annotation) only where a job namespace binds it
    checkpoint = one(docs, "ClusterRole", "gpuwarden-remediation-checkpoint")
    assert rbac_grants(checkpoint) == {
        ("", "pods", "patch"),
        ("", "pods", "delete"),  # a gang restarted whole (JobSet, PyTorchJob, PodGroup)
        ("bus.volcano.sh", "commands", "create"),  # a Volcano vcjob's RestartJob
    }
    # validation Jobs: only in gpuwarden's own namespace
    validation = one(docs, "Role", "gpuwarden-remediation-validation")
    assert validation["metadata"]["namespace"] == "gpuwarden"
    assert rbac_grants(validation) == {
        ("batch", "jobs", "create"), ("batch", "jobs", "get"), ("batch", "jobs", "delete"),
        ("", "pods/log", "get"),
    }  # fmt: skip
    vbind = one(docs, "RoleBinding", "gpuwarden-remediation-validation")
    assert vbind["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": "gpuwarden-remediation-validation"}  # fmt: skip
    assert vbind["subjects"] == [{"kind": "ServiceAccount", "name": "gpuwarden-remediation",
                                  "namespace": "gpuwarden"}]  # fmt: skip
    assert len(of_kind(docs, "ClusterRole", "Role")) == 3
    assert len(of_kind(docs, "ClusterRoleBinding")) == 1
    job_ns = build(KUBE / "job-namespace")
    (rb,) = of_kind(job_ns, "RoleBinding")
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": "gpuwarden-remediation-checkpoint"}  # fmt: skip
    assert not of_kind(job_ns, "ClusterRoleBinding", "ClusterRole", "Role")
    binding = one(docs, "ClusterRoleBinding", "gpuwarden-remediation")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    (subject,) = binding["subjects"]
    deployment = one(docs, "Deployment", "gpuwarden-remediation")
    assert subject["name"] == pod_spec(deployment)["serviceAccountName"]
    assert subject["namespace"] == deployment["metadata"]["namespace"]
    sa = one(docs, "ServiceAccount", subject["name"])
    assert sa["automountServiceAccountToken"] is False  # only the remediation pod opts in
    for w in of_kind(docs, "Deployment", "DaemonSet"):
        token = pod_spec(w).get("automountServiceAccountToken")
        assert token is (w is deployment), w["metadata"]["name"]


@pytest.mark.parametrize("kdir", [BASE, *OVERLAYS], ids=lambda p: p.relative_to(KUBE).as_posix())
def test_no_container_is_privileged_without_also_allowing_escalation(kdir: Path) -> None:
    # The API server rejects privileged: true with allowPrivilegeEscalation: false; the JSON
    # schema cannot express that rule.
    for w in of_kind(build(kdir), "Deployment", "DaemonSet"):
        sc = container(w)["securityContext"]
        assert not (sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False)


def test_kmsg_privileged_overlay_changes_only_the_exporter_privilege(docs: list) -> None:
    overlay = build(KUBE / "overlays" / "kmsg-privileged")
    changed = [d for d in overlay if d not in docs]
    assert [(d["kind"], d["metadata"]["name"]) for d in changed] == [
        ("DaemonSet", "gpuwarden-exporter")
    ]
    sc = container(changed[0])["securityContext"]
    assert sc["privileged"] is True and sc["allowPrivilegeEscalation"] is True
    assert len(overlay) == len(docs)


@pytest.mark.parametrize("overlay_dir,key", sorted(VARIANT_OVERLAYS.items()))
def test_an_exporter_variant_overlay_swaps_the_exporter_rules_and_dashboards_for_its_own(
    docs: list, overlay_dir: str, key: str
) -> None:
    overlay = build(KUBE / "overlays" / overlay_dir)
    names = {(d["kind"], d["metadata"]["name"]) for d in overlay}
    base = {(d["kind"], d["metadata"]["name"]) for d in docs}
    removed, added = base - names, names - base
    assert ("DaemonSet", "gpuwarden-exporter") in removed
    natives = {p.name for p in (ROOT / "alerts").glob("*.rules.yml")}
    variants = {p.name for p in (ROOT / "alerts" / key).glob("*.rules.yml")}
    assert variants, f"alerts/{key} has no rule files"
    for name in variants:
        stem = name.removesuffix(".yml").replace(".", "-").replace("_", "-")
        assert ("PrometheusRule", f"gpuwarden-{key}-{stem}") in added
        # a twin replaces its native namesake; a file of its own joins the natives
        assert (("PrometheusRule", f"gpuwarden-{stem}") in removed) is (name in natives)
    # natives with no twin (the pipeline's, remediation's) stay
    for name in natives - variants:
        stem = name.removesuffix(".yml").replace(".", "-").replace("_", "-")
        assert ("PrometheusRule", f"gpuwarden-{stem}") in names & base
    assert len({n for k, n in added if k == "PrometheusRule"}) == len(variants)
    dashboards = {n for k, n in names if k == "ConfigMap" and n.startswith("gpuwarden-dashboard-")}
    assert dashboards and all(n.endswith(f"-{key}") for n in dashboards)
    assert all(d["metadata"]["namespace"] == "gpuwarden" for d in overlay if d["kind"] != "Namespace"
               and d["kind"] not in ("ClusterRole", "ClusterRoleBinding"))  # fmt: skip
    # nothing else changed: the workloads and RBAC are the base's
    unchanged = [d for d in overlay if (d["kind"], d["metadata"]["name"]) in base]
    assert all(d in docs for d in unchanged)


def test_the_job_namespace_kit_validates_and_shares_one_ack_directory_with_remediation(
    docs: list,
) -> None:
    job_ns = build(KUBE / "job-namespace")
    for doc in job_ns:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    pvs = {d["metadata"]["name"]: d for d in of_kind(job_ns, "PersistentVolume")}
    (job_claim,) = of_kind(job_ns, "PersistentVolumeClaim")
    ours = one(docs, "PersistentVolumeClaim", "gpuwarden-acks")
    for claim in (job_claim, ours):
        pv = pvs[claim["spec"]["volumeName"]]
        assert pv["spec"]["claimRef"] == {
            "namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"],
        }  # fmt: skip
        assert claim["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert len({str(pv["spec"]["nfs"]) for pv in pvs.values()}) == 1  # one shared directory
    d = one(docs, "Deployment", "gpuwarden-remediation")
    volumes = {v["name"]: v for v in pod_spec(d)["volumes"]}
    assert volumes["acks"]["persistentVolumeClaim"]["claimName"] == "gpuwarden-acks"
    cm = one(docs, "ConfigMap", "gpuwarden-remediation-policy")
    ack_dir = yaml.safe_load(cm["data"]["policy.yaml"])["checkpoint"]["ack_dir"]
    assert mount_path(container(d), "acks") == ack_dir


def test_network_policies_admit_only_monitoring_to_gpuwarden_pods(docs: list) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    selected = set()
    for np in policies:
        assert np["spec"]["policyTypes"] == ["Ingress"]
        sel = np["spec"]["podSelector"]
        names = sel.get("matchLabels", {}).get("app.kubernetes.io/name")
        names = [names] if names else sel["matchExpressions"][0]["values"]
        selected.update(names)
        for rule in np["spec"]["ingress"]:
            for peer in rule["from"]:
                ns = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                assert ns == "monitoring"
    assert selected == {"gpuwarden-remediation", "gpuwarden-analyzer", "gpuwarden-exporter"}
    (rem,) = [n for n in policies if n["metadata"]["name"] == "gpuwarden-remediation"]
    port_names = {
        p["name"] for p in container(one(docs, "Deployment", "gpuwarden-remediation"))["ports"]
    }
    assert {p["port"] for r in rem["spec"]["ingress"] for p in r["ports"]} <= port_names


@pytest.mark.parametrize(
    "kdir",
    [BASE, *OVERLAYS, KUBE / "job-namespace"],
    ids=lambda p: p.relative_to(KUBE).as_posix(),
)
def test_kubectl_kustomize_builds_what_the_test_builder_builds(kdir: Path) -> None:
    import subprocess

    from tests.realcomp import require_binary

    kubectl = require_binary("kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", str(kdir)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    real = [d for d in yaml.safe_load_all(out.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    assert sorted(real, key=key) == sorted(build(kdir), key=key)


def test_alertmanager_gets_the_token_from_the_secret_remediation_mounts(docs: list) -> None:
    (amc,) = of_kind(docs, "AlertmanagerConfig")
    d = one(docs, "Deployment", "gpuwarden-remediation")
    volumes = {v["name"]: v for v in pod_spec(d)["volumes"]}
    secret = volumes["webhook-token"]["secret"]["secretName"]
    token_file = Path(flags(container(d))["--webhook-token-file"])
    ((hook,),) = [r["webhookConfigs"] for r in amc["spec"]["receivers"]]
    assert hook["httpConfig"]["authorization"]["credentials"] == {
        "name": secret, "key": token_file.name,
    }  # fmt: skip
    svc = one(docs, "Service", "gpuwarden-remediation")
    ns, port = svc["metadata"]["namespace"], svc["spec"]["ports"][0]["port"]
    assert hook["url"] == f"http://gpuwarden-remediation.{ns}.svc:{port}/alertmanager"
    # the same route as the bare-metal Alertmanager config
    am = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
    (bare,) = [r for r in am["route"]["routes"] if r["receiver"] == "gpuwarden-remediation"]
    (matcher,) = amc["spec"]["route"]["matchers"]
    assert bare["matchers"] == [f'{matcher["name"]}{matcher["matchType"]}"{matcher["value"]}"']
    assert bare["group_by"] == amc["spec"]["route"]["groupBy"]


# What each KubeApi method (remediation/backends/kubeapi.py) needs from RBAC. The custom
# object calls are resolved by the constants their callers pass (checked below).
KUBEAPI_GRANTS: dict[str, set[tuple[str, str, str]]] = {
    "list_nodes": {("", "nodes", "list")},
    "read_node": {("", "nodes", "get")},
    "patch_node": {("", "nodes", "patch")},
    "list_pods": {("", "pods", "list")},
    "read_pod": {("", "pods", "get")},
    "patch_pod": {("", "pods", "patch")},
    "evict": {("", "pods/eviction", "create")},
    "delete_pod": {("", "pods", "delete")},
    "create_job": {("batch", "jobs", "create")},
    # a server-side dry run (dryRun=All) is authorised as the create it tries
    "dry_run_create_job": {("batch", "jobs", "create")},
    "read_job": {("batch", "jobs", "get")},
    "delete_job": {("batch", "jobs", "delete")},
    "list_pods_by_label": {("", "pods", "list")},
    "read_pod_log": {("", "pods/log", "get")},
    "list_custom": {(SNR, "selfnoderemediationtemplates", "list"),
                    (SNR, "selfnoderemediations", "list"),
                    (DRA, "resourceslices", "list"), (DRA, "resourceclaims", "list"),
                    (DRA, "devicetaintrules", "list")},
    "create_custom": {(SNR, "selfnoderemediations", "create"),
                      ("bus.volcano.sh", "commands", "create")},
    "delete_custom": {(SNR, "selfnoderemediations", "delete")},
    "create_cluster_custom": {(DRA, "devicetaintrules", "create")},
    "read_cluster_custom": {(DRA, "devicetaintrules", "get")},
    "patch_cluster_custom": {(DRA, "devicetaintrules", "patch")},
    "delete_cluster_custom": {(DRA, "devicetaintrules", "delete")},
    # API discovery (GET /apis/<group>[/<version>]): every authenticated user may read it
    # (the system:discovery ClusterRole), no grant of ours
    "served_versions": set(),
    # Node conditions (remediation/backends/nodehealth.py): the status subresource only
    "patch_node_status": {("", "nodes/status", "patch")},
    "create_event": {("", "events", "create")},
    "patch_event": {("", "events", "patch")},
}  # fmt: skip


def test_the_shipped_rbac_grants_exactly_the_calls_the_kubernetes_code_makes(docs: list) -> None:
    callers = [*(ROOT / "remediation" / "backends").glob("*.py"),
               *(ROOT / "remediation" / "validation").glob("*.py"),
               *(ROOT / "remediation" / "gpureset").glob("*.py"),
               *(ROOT / "remediation" / "maintenance").glob("*.py"),
               ROOT / "remediation" / "job_namespace.py"]  # fmt: skip
    called = {
        m
        for f in callers
        if f.name != "kubeapi.py"
        for m in re.findall(r"\bapi\.(\w+)\(", f.read_text())
    }
    # a new call fails here until its grant is mapped above (and shipped)
    assert called == set(KUBEAPI_GRANTS), sorted(called ^ set(KUBEAPI_GRANTS))
    needed = set().union(*KUBEAPI_GRANTS.values())
    granted = set().union(*(rbac_grants(r) for r in of_kind(docs, "ClusterRole", "Role")))
    assert granted == needed, (sorted(granted - needed), sorted(needed - granted))
    # the custom resources named above are the ones the code addresses
    gangs = (ROOT / "remediation" / "backends" / "gangs.py").read_text()
    kube = (ROOT / "remediation" / "backends" / "kubernetes.py").read_text()
    assert "bus.volcano.sh" in gangs + kube and '"commands"' in gangs + kube
    snr = (ROOT / "remediation" / "backends" / "noderemediation.py").read_text()
    assert SNR in snr and "selfnoderemediationtemplates" in snr
    dra = (ROOT / "remediation" / "backends" / "dra.py").read_text()
    assert f'GROUP = "{DRA}"' in dra and '"devicetaintrules"' in dra


SHARDED = KUBE / "overlays" / "analyzer-sharded"
# LeaseMembership's calls (CoordinationV1Api method prefix) -> the RBAC verb each needs
LEASE_VERBS = {"read": "get", "list": "list", "create": "create", "replace": "update",
               "patch": "patch", "delete": "delete"}  # fmt: skip


def test_the_sharded_overlay_runs_replicas_named_after_their_pods_meeting_in_leases(
    docs: list,
) -> None:
    from analyzer.settings import REPLICA_NAME, AnalyzerSettings

    overlay = build(SHARDED)
    d = one(overlay, "Deployment", "gpuwarden-analyzer")
    assert d["spec"]["replicas"] == 4
    c = container(d)
    f = flags(c)
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert f["--replica"] == "$(POD_NAME)" and env["POD_NAME"] == "metadata.name"
    assert f["--membership"] == "kubernetes:$(POD_NAMESPACE)"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    # the longest name a Deployment gives its pods: <name>-<10-char template hash>-<5 chars>
    longest = f"{d['metadata']['name']}-7d9c5b6f4b-x2x9k"
    assert REPLICA_NAME.fullmatch(longest), longest
    expanded = {"prometheus": f["--prometheus"], "interval": float(f["--interval"]),
                "replica": longest, "membership": f"kubernetes:{d['metadata']['namespace']}"}  # fmt: skip
    assert AnalyzerSettings(**expanded).replica == longest  # the settings accept it
    # a rollout starts a new replica before an old one stops, one at a time, and gives each
    # a cycle to join; an old one has time to remove its heartbeat on SIGTERM
    assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert d["spec"]["minReadySeconds"] >= 2 * float(f["--interval"])
    assert pod_spec(d)["terminationGracePeriodSeconds"] >= 10
    pdb = one(overlay, "PodDisruptionBudget", "gpuwarden-analyzer")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"].items()
        <= d["spec"]["template"]["metadata"]["labels"].items()
    )
    # the token is mounted for the analyzer's own ServiceAccount, nothing else changes
    assert pod_spec(d)["serviceAccountName"] == "gpuwarden-analyzer"
    assert pod_spec(d)["automountServiceAccountToken"] is True
    base = {(x["kind"], x["metadata"]["name"]): x for x in docs}
    changed = [x for x in overlay if base.get((x["kind"], x["metadata"]["name"])) != x]
    assert sorted((x["kind"], x["metadata"]["name"]) for x in changed) == [
        ("Deployment", "gpuwarden-analyzer"),
        ("PodDisruptionBudget", "gpuwarden-analyzer"),
        ("Role", "gpuwarden-analyzer-replicas"),
        ("RoleBinding", "gpuwarden-analyzer-replicas"),
        ("ServiceAccount", "gpuwarden-analyzer"),
    ]
    assert len(overlay) == len(docs) + 4
    assert all(x["metadata"]["namespace"] == "gpuwarden" for x in changed)


def test_the_sharded_analyzers_role_grants_exactly_the_lease_and_configmap_calls_its_code_makes(
) -> None:  # fmt: skip
    code = (ROOT / "analyzer" / "replicas" / "leases.py").read_text()
    called = set(re.findall(r"\bapi\.(\w+)_namespaced_lease\(", code))
    assert called and called <= set(LEASE_VERBS), sorted(called - set(LEASE_VERBS))
    scores = (ROOT / "analyzer" / "replicas" / "configmaps.py").read_text()
    cm_called = set(re.findall(r"\bapi\.(\w+)_namespaced_config_map\(", scores))
    assert cm_called and cm_called <= set(LEASE_VERBS), sorted(cm_called - set(LEASE_VERBS))
    overlay = build(SHARDED)
    role = one(overlay, "Role", "gpuwarden-analyzer-replicas")
    assert rbac_grants(role) == {
        ("coordination.k8s.io", "leases", LEASE_VERBS[c]) for c in called
    } | {("", "configmaps", LEASE_VERBS[c]) for c in cm_called}
    binding = one(overlay, "RoleBinding", "gpuwarden-analyzer-replicas")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "gpuwarden-analyzer-replicas"}  # fmt: skip
    d = one(overlay, "Deployment", "gpuwarden-analyzer")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "gpuwarden",
                                    "name": pod_spec(d)["serviceAccountName"]}]  # fmt: skip
    # namespaced only: no cluster-wide grant joins the base's
    assert {(x["kind"], x["metadata"]["name"]) for x in of_kind(overlay, "ClusterRole")} == {
        (x["kind"], x["metadata"]["name"]) for x in of_kind(build(BASE), "ClusterRole")
    }
