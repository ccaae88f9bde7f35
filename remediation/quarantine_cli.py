"""`gpuwarden quarantine list|show|release|pause|resume|history|breaker reset`: the operator's CLI.

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


def render(command: str, body: Any) -> list[str]:
    if command == "list":
        head = (
            f"paused={body['paused']} breaker_open={body['breaker_open']} "
            f"dry_run={body['dry_run']} backend={body['backend']}"
        )
        return [head] + [
            f"{n['node']:<16} {n['state']:<12} {n['fault_class'] or '-':<14} "
            f"{n['action'] or '-':<18} since {_when(n['since'])}"
            for n in body["nodes"]
        ]
    if command == "show":
        node = body["node"] or {}
        return [json.dumps(node, sort_keys=True), *_decision_lines(body["history"])]
    if command == "history":
        return _decision_lines(body["decisions"])
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
        elif c == "show":
            status, body = call(args, "GET", f"nodes/{urllib.parse.quote(args.node)}")
        elif c == "release":
            status, body = call(
                args, "POST", f"nodes/{urllib.parse.quote(args.node)}/release", who=who
            )
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
    return 0 if status == 200 else 1
