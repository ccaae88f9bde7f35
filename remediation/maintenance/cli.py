"""`gpuwarden maintenance plan|start|status|pause|resume|abort|skip|force`: the operator's
client of ``/api/v1/maintenance`` (same credentials as ``gpuwarden quarantine``: the token
from GPUWARDEN_WEBHOOK_TOKEN or --token-file, never a command-line value).

    gpuwarden maintenance plan  --nodes 'gpu-node-[001-064]' --command 'ssh {node} /opt/upgrade.sh' \\
        --wave-size 8 --suite post-maintenance --max-failures 2
    gpuwarden maintenance start ...same options...
    gpuwarden maintenance start --nodes 'gpu-node-[001-064]' --kube-job driver-upgrade.yaml
        # a batch/v1 Job per node ({node} replaced), bound to it; Kubernetes backend only
    gpuwarden maintenance status [RUN]
    gpuwarden maintenance pause|resume|abort RUN
    gpuwarden maintenance skip|force RUN NODE     # a stuck node: the operator decides
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remediation.quarantine_cli import DEFAULT_URL, call


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden maintenance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--url", default=os.environ.get("GPUWARDEN_REMEDIATION_URL", DEFAULT_URL))
    p.add_argument("--token-file", help="file with the bearer token (else GPUWARDEN_WEBHOOK_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    sub = p.add_subparsers(dest="verb", required=True)  # --command is the operation
    for verb, text in (("plan", "show the waves and the budget room (a dry run)"),
                       ("start", "start a run")):  # fmt: skip
        s = sub.add_parser(verb, help=text)
        what = s.add_argument_group("which nodes (all given must match)")
        what.add_argument("--nodes", help="hostlist, e.g. gpu-node-[001-064]")
        what.add_argument("--partition", help="a Slurm partition")
        what.add_argument("--domain", action="append", default=[],
                          help="KIND=NAME of the topology, e.g. rack=r01 (repeatable)")  # fmt: skip
        op = s.add_mutually_exclusive_group(required=True)
        op.add_argument("--command", help="run per node ({node} replaced), e.g. 'ssh {node} ...'")
        op.add_argument("--slurm-reboot", action="store_true", help="scontrol reboot ASAP")
        op.add_argument("--kube-job", metavar="FILE",
                        help="a batch/v1 Job manifest (YAML), one Job per node ({node} replaced)")  # fmt: skip
        op.add_argument("--no-operation", action="store_true", help="drain, validate, release")
        s.add_argument("--operation-timeout-s", type=float, default=3600.0)
        s.add_argument("--wave-size", type=int, default=1)
        s.add_argument("--max-failures", type=int, default=0, help="stop after more failures")
        s.add_argument("--drain-deadline-s", type=float, default=3600.0,
                       help="jobs checkpoint or end by then, else the operator decides")  # fmt: skip
        s.add_argument("--suite", default="", help="validation suite before release")
        s.add_argument("--force", action="store_true",
                       help="at the deadline, requeue jobs WITHOUT a checkpoint")  # fmt: skip
        s.add_argument("--reason", default="")
    st = sub.add_parser("status", help="one run, or every run")
    st.add_argument("run", nargs="?", type=int)
    for verb in ("pause", "resume", "abort"):
        sub.add_parser(verb, help=f"{verb} a run").add_argument("run", type=int)
    for verb in ("skip", "force"):
        s = sub.add_parser(verb, help=f"{verb} a stuck node of a run")
        s.add_argument("run", type=int)
        s.add_argument("node")
    return p


def request_body(a: argparse.Namespace) -> dict[str, Any]:
    select: dict[str, Any] = {}
    if a.nodes:
        select["nodes"] = a.nodes
    if a.partition:
        select["partition"] = a.partition
    for item in a.domain:
        kind, _, name = item.partition("=")
        select[kind] = name
    if a.command:
        import shlex

        op: dict[str, Any] = {"kind": "command", "argv": shlex.split(a.command)}
    elif a.kube_job:
        op = {"kind": "kube_job", "job": read_manifest(a.kube_job)}
    else:
        op = {"kind": "slurm_reboot" if a.slurm_reboot else "none"}
    op["timeout_s"] = a.operation_timeout_s
    return {"select": select, "operation": op, "wave_size": a.wave_size,
            "max_failures": a.max_failures, "drain_deadline_s": a.drain_deadline_s,
            "suite": a.suite, "force": a.force, "reason": a.reason}  # fmt: skip


class ManifestError(ValueError):
    """A --kube-job file that cannot be read or is not one YAML document."""


def read_manifest(path: str) -> Any:
    """The --kube-job file's one YAML document (the service checks that it is a batch/v1
    Job, and the API server checks the rest with a dry run, before anything starts)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError(f"--kube-job {path}: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ManifestError(f"--kube-job {path}: not YAML: {' '.join(str(e).split())}") from None
    try:  # sent as JSON: a YAML date or the like would not go
        return json.loads(json.dumps(doc, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ManifestError(f"--kube-job {path}: {e} (quote it in the YAML)") from None


def _eta(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.0f} min"


def render(command: str, body: Any) -> list[str]:
    if "error" in body:
        return [f"error: {body['error']}"]
    if command == "plan":
        lines = [f"dry run: {len(body['spec']['nodes'])} nodes in {len(body['waves'])} waves, "
                 f"{body['spec']['operation']['kind']}; out now: {', '.join(body['out_now']) or 'none'}"
                 f" (fleet budget room: {body['headroom']} nodes)"]  # fmt: skip
        lines += [f"  wave {i + 1}: {' '.join(w)}" for i, w in enumerate(body["waves"])]
        lines += [f"  over budget now: {v}" for v in body["over_budget"]]
        return lines
    runs = body.get("runs", [body])
    lines = []
    for r in runs:
        counts = " ".join(f"{k}={v}" for k, v in sorted(r["counts"].items()))
        lines.append(f"run {r['id']}: {r['state']} {r['progress'] * 100:.0f}% eta {_eta(r['eta_s'])}"
                     f" ({counts}) {r['reason']}".rstrip())  # fmt: skip
        if command != "status" or len(runs) == 1:
            lines += [f"  {n['node']:<16} wave {n['wave'] + 1:<3} {n['state']:<10} {n['reason']}"
                      for n in r["nodes"]]  # fmt: skip
    return lines or ["no maintenance run"]


def main(argv: Sequence[str] | None = None) -> int:
    a = parser().parse_args(sys.argv[1:] if argv is None else argv)
    who, c = getpass.getuser(), a.verb
    try:
        req = request_body(a) if c in ("plan", "start") else None
    except ManifestError as e:
        print(f"gpuwarden maintenance: {e}", file=sys.stderr)
        return 2
    try:
        if req is not None:
            status, body = _post_json(a, "maintenance/plan" if c == "plan" else "maintenance",
                                      req, who)  # fmt: skip
        elif c == "status":
            status, body = call(a, "GET", f"maintenance/{a.run}" if a.run else "maintenance")
        elif c in ("skip", "force"):
            status, body = call(a, "POST", f"maintenance/{a.run}/{c}", who=who, node=a.node)
        else:
            status, body = call(a, "POST", f"maintenance/{a.run}/{c}", who=who)
    except (OSError, ValueError) as e:
        print(f"gpuwarden maintenance: cannot reach {a.url}: {e}", file=sys.stderr)
        return 2
    if status == 401:
        print("gpuwarden maintenance: unauthorized (set GPUWARDEN_WEBHOOK_TOKEN or --token-file)",
              file=sys.stderr)  # fmt: skip
        return 2
    print(json.dumps(body, indent=2, sort_keys=True) if a.json else "\n".join(render(c, body)))
    return 0 if status in (200, 201) else 1


def _post_json(a: argparse.Namespace, path: str, body: dict[str, Any], who: str) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    from remediation.quarantine_cli import _token

    url = f"{a.url.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode({'who': who})}"
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {_token(a)}",
                                          "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
