"""`gpuwarden quarantine list|show|placement|release|validate|pause|resume|history|breaker reset`.

The operator's CLI.

A thin client of the service's /api/v1/ (same credentials as the webhook: the token from
GPUWARDEN_WEBHOOK_TOKEN or --token-file, never a command-line value).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:9836"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden quarantine", description=__doc__)
    p.add_argument("--url", default=os.environ.get("GPUWARDEN_REMEDIATION_URL", DEFAULT_URL))
    p.add_argument("--token-file", help="file with the bearer token (else GPUWARDEN_WEBHOOK_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="nodes gpuwarden holds or held, and the service state")
    sub.add_parser("show", help="one node and its decisions").add_argument("node")
    rel = sub.add_parser("release", help="put a node back in service (only gpuwarden's drains)")
    rel.add_argument("node")
    val = sub.add_parser("validate", help="run the node's validation suite now; print the verdict")
    val.add_argument("node")
    val.add_argument("--suite", help="a suite of the policy (default: the node's fault class's)")
    val.add_argument("--no-wait", action="store_true", help="start it and print its id")
    val.add_argument("--wait-s", type=float, default=7200.0, help="how long to wait for it")
    sub.add_parser("placement", help="nodes (or GPUs) de-preferred by placement tiers")
    sub.add_parser("pause", help="stop acting (decisions are still recorded)")
    sub.add_parser("resume", help="act again")
    brk = sub.add_parser("breaker", help="the storm breaker")
    brk.add_argument("verb", choices=["reset"], help="reset: close it now (recorded)")
    hist = sub.add_parser("history", help="recent decisions")
    hist.add_argument("node", nargs="?")
    hist.add_argument("--limit", type=int, default=50)
    return p


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return os.environ.get("GPUWARDEN_WEBHOOK_TOKEN", "")


def call(args: argparse.Namespace, method: str, path: str, **query: Any) -> tuple[int, Any]:
    q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    url = f"{args.url.rstrip('/')}/api/v1/{path}" + (f"?{q}" if q else "")
    headers = {"Authorization": f"Bearer {_token(args)}"}
    req = urllib.request.Request(
        url, method=method, headers=headers, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "-"


def _decision_lines(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"{_when(d['at'])}  {d['node'] or '-':<16} {d['action']:<18} {d['verdict']:<5} "
        f"{d['guard']:<14} {d['reason']}"
        for d in rows
    ]


def _validation(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    return f"  validation {v['state']} #{v['id']} ({v['suite']}, {_when(v['started_at'])})"


def _verdict_lines(v: dict[str, Any]) -> list[str]:
    lines = [
        f"validation #{v['id']} of {v['node']}: {v['state']} (suite {v['suite']}, "
        f"{v['trigger']} by {v['who']})"
    ]
    if v.get("reason"):
        lines.append(f"  {v['reason']}")
    for step in (v.get("evidence") or {}).get("steps", []):
        meas = ", ".join(f"{k}={val:g}" for k, val in sorted(step["measurements"].items()))
        word = "ok" if step["passed"] else "FAILED"
        lines.append(f"  {step['step']}: {word}" + (f" ({meas})" if meas else ""))
        lines += [f"    {r}" for r in step["reasons"]]
    return lines


def _placement_line(n: dict[str, Any]) -> str:
    ev = n.get("evidence") or {}
    what = f"{ev.get('metric', '-')}={ev.get('value', '-')} p{ev.get('peer_percentile', '-')}"
    where = n["node"] + (f"/gpu{n['gpu']}" if n.get("gpu") is not None else "")
    return (
        f"{where:<20} {n['tier']:<9} since {_when(n['since'])} until {_when(n['until'])} "
        f"{what} (of {ev.get('group_size', '-')}): {n['reason']}"
    )


def render(command: str, body: Any) -> list[str]:
    if command == "validate":
        return _verdict_lines(body) if "state" in body else [str(body.get("error", body))]
    if command == "list":
        head = (
            f"paused={body['paused']} breaker_open={body['breaker_open']} "
            f"dry_run={body['dry_run']} backend={body['backend']}"
        )
        return [head] + [
            f"{n['node']:<16} {n['state']:<12} {n['fault_class'] or '-':<14} "
            f"{n['action'] or '-':<18} since {_when(n['since'])}" + _validation(n.get("validation"))
            for n in body["nodes"]
        ]
    if command == "placement":
        return [_placement_line(n) for n in body["nodes"]] or ["no node de-preferred"]
    if command == "show":
        node = body["node"] or {}
        return [json.dumps(node, sort_keys=True), *_decision_lines(body["history"])]
    if command == "history":
        return _decision_lines(body["decisions"])
    if command == "release" and body.get("validation"):
        v = body["validation"]
        return [f"{body.get('node')}: validation #{v['id']} ({v['suite']}) runs first; "
                "released when it passes (gpuwarden quarantine list shows it)"]  # fmt: skip
    if command == "release":
        word = "released" if body.get("released") else "NOT released"
        return [f"{body.get('node')}: {word} ({body.get('guard')}: {body.get('reason')})"]
    return [f"paused={body.get('paused')} breaker_open={body.get('breaker_open')}"]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    c = args.command
    who = getpass.getuser()
    try:
        if c == "list":
            status, body = call(args, "GET", "nodes")
        elif c == "placement":
            status, body = call(args, "GET", "placement")
        elif c == "show":
            status, body = call(args, "GET", f"nodes/{urllib.parse.quote(args.node)}")
        elif c == "release":
            status, body = call(
                args, "POST", f"nodes/{urllib.parse.quote(args.node)}/release", who=who
            )
        elif c == "validate":
            status, body = _validate(args, who)
        elif c in ("pause", "resume"):
            status, body = call(args, "POST", c, who=who)
        elif c == "breaker":
            status, body = call(args, "POST", "breaker/reset", who=who)
        else:
            status, body = call(args, "GET", "decisions", node=args.node, limit=args.limit)
    except (OSError, ValueError) as e:
        print(f"gpuwarden quarantine: cannot reach {args.url}: {e}", file=sys.stderr)
        return 2
    if status == 401:
        print(
            "gpuwarden quarantine: unauthorized (set GPUWARDEN_WEBHOOK_TOKEN or --token-file)",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(body, indent=2, sort_keys=True) if args.json else "\n".join(render(c, body)))
    if c == "validate":
        return 0 if status in (200, 202) and body.get("state") in ("passed", "running") else 1
    return 0 if status == 200 or (status == 202 and c == "release") else 1


def _validate(args: argparse.Namespace, who: str) -> tuple[int, Any]:
    """Start the run, then (unless --no-wait) poll it until it is concluded."""
    path = f"nodes/{urllib.parse.quote(args.node)}/validate"
    status, body = call(args, "POST", path, who=who, suite=args.suite)
    if status != 202:
        return status, body
    run = body["validation"]
    deadline = time.monotonic() + args.wait_s
    while not args.no_wait and run["state"] == "running" and time.monotonic() < deadline:
        time.sleep(1.0)
        status, run = call(args, "GET", f"validations/{run['id']}")
        if status != 200:
            return status, run
    return 202 if run["state"] == "running" else 200, run
