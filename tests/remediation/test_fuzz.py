"""Fuzzing the webhook of a running service: malformed JSON, wrong types, huge bodies, bad auth.

Always a 4xx (never a 5xx), nothing journaled, and the service healthy afterwards.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.realcomp import free_port, http_get
from tests.remediation.helpers import LIVE_POLICY, TOKEN, start_service

GOOD = f"Bearer {TOKEN}"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
not_a_string = st.none() | st.booleans() | st.integers() | st.lists(st.integers(), max_size=2)
near_alert = st.fixed_dictionaries(
    {
        "status": not_a_string | st.sampled_from(["firing", "resolved"]),
        "labels": json_values,
        "fingerprint": not_a_string,
        "startsAt": json_values,
    },
)
near_payload = st.fixed_dictionaries(
    {
        "version": st.sampled_from(["4", 4, "3", None]),
        "alerts": st.lists(near_alert, min_size=1, max_size=3),
    }
)
bodies = (
    st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | near_payload.map(lambda v: json.dumps(v).encode())
)
auths = st.sampled_from(
    [None, "Bearer wrong", "Basic Zm9vOmJhcg==", GOOD, GOOD + " ", "bearer " + TOKEN]
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "policy.yaml").write_text(LIVE_POLICY)
    port = free_port()
    proc = start_service(tmp, port)
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, tmp / "state.db"
    finally:
        proc.terminate()
        proc.wait(10)


def post(url: str, body: bytes, auth: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": auth} if auth is not None else {}
    req = urllib.request.Request(f"{url}/alertmanager", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def empty_but_valid(body: bytes) -> bool:
    try:
        d = json.loads(body)
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("alerts") == [] and str(d.get("version", "4")) == "4"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies, auth=auths)
def test_malformed_webhooks_get_4xx_with_a_reason_and_change_nothing(
    server: tuple[str, Path], body: bytes, auth: str | None
) -> None:
    url, _ = server
    status, reply = post(url, body, auth)
    if auth != GOOD and auth != GOOD + " ":
        assert status == 401
    elif empty_but_valid(body):
        assert status == 200 and reply == {"accepted": 0, "repeated": 0}
    else:
        assert status == 400 and reply["error"]


def test_huge_bodies_get_413_and_the_service_stays_healthy_with_an_empty_journal(
    server: tuple[str, Path],
) -> None:
    url, db_path = server
    assert post(url, b"[" * (3 << 20), GOOD)[0] == 413
    assert post(url, b'{"alerts": [' + b'{"a": 1},' * 300_000 + b"{}]}", GOOD)[0] == 413
    assert post(url, json.dumps({"alerts": [{}] * 6000}).encode(), GOOD)[0] == 400
    assert json.loads(http_get(f"{url}/healthz"))["status"] == "ok"
    db = sqlite3.connect(db_path)
    try:
        assert db.execute("SELECT COUNT(*) FROM alerts").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == 0
    finally:
        db.close()
