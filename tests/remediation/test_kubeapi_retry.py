"""How hard the Kubernetes client tries: ``bounded_retry`` and ``OfficialKubeApi.from_config``.

End to end, the official client built by ``from_config`` talks real HTTP to a small local
server (``http.server``) that drops connections, stalls, answers 429 with Retry-After or
redirects, and counts what reached it: a GET is resent at most ``retries`` times, at once; a
POST never; a status is the caller's to judge; a redirect is not followed. ``bounded_retry``
itself is driven through urllib3's ``Retry`` interface (``increment``), which is how
urllib3's connection pool consults it. Where the client's configuration comes from
(``$KUBECONFIG``, the pod's service account) is pinned with files in ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes.client import ApiException
from kubernetes.config import incluster_config
from urllib3 import HTTPResponse
from urllib3.exceptions import (
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from remediation.backends.base import Unavailable
from remediation.backends.kubeapi import RETRIES, OfficialKubeApi, bounded_retry
from tests.remediation.test_kubeapi_adapter import Wire

NODES = "/api/v1/nodes"
EVICTION = "/api/v1/namespaces/ml/pods/train-0/eviction"


@dataclass
class Behaviour:
    """What the local server does per path: ``drop`` (close without an answer), ``stall``
    (seconds before answering), else answer ``status`` with ``headers`` and a JSON body."""

    drop: set[str] = field(default_factory=set)
    stall: dict[str, float] = field(default_factory=dict)
    answers: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, auth

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.seen if (m, p) == (method, path))


@contextmanager
def local_server() -> Iterator[tuple[str, Behaviour]]:
    b = Behaviour()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def serve(self) -> None:
            path = self.path.partition("?")[0]
            b.seen.append((self.command, path, self.headers.get("Authorization", "")))
            if path in b.drop:
                self.close_connection = True
                return
            time.sleep(b.stall.get(path, 0))
            status, headers = b.answers.get(path, (200, {}))
            body = b'{"kind": "Status", "reason": "TooManyRequests"}' if status >= 400 else b"{}"
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", **headers}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up on a stall
                self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = serve

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", b
    finally:
        srv.shutdown()
        srv.server_close()


# --- bounded_retry through urllib3's Retry ---------------------------------------------


def refused() -> NewConnectionError:
    return NewConnectionError("conn", "Failed to establish a new connection: refused")  # type: ignore[arg-type]


def read_timeout() -> ReadTimeoutError:
    return ReadTimeoutError(None, NODES, "Read timed out.")  # type: ignore[arg-type]


def test_retries_below_zero_are_refused_naming_the_number() -> None:
    with pytest.raises(ValueError, match=r"^Kubernetes client retries must be >= 0, got -1$"):
        bounded_retry(-1)


def test_the_retry_budget_is_shared_by_connection_and_read_errors() -> None:
    r = bounded_retry(1).increment("GET", NODES, error=refused())
    with pytest.raises(MaxRetryError):
        r.increment("GET", NODES, error=read_timeout())


def test_a_get_is_resent_as_many_times_as_allowed_and_no_more() -> None:
    r = bounded_retry(2)
    r = r.increment("GET", NODES, error=read_timeout())
    r = r.increment("GET", NODES, error=ProtocolError("Connection aborted."))
    with pytest.raises(MaxRetryError):
        r.increment("GET", NODES, error=read_timeout())


def test_a_post_whose_answer_timed_out_is_never_resent() -> None:
    with pytest.raises(ReadTimeoutError):
        bounded_retry(3).increment("POST", EVICTION, error=read_timeout())


def test_an_error_that_is_neither_a_connection_nor_a_read_error_is_not_retried() -> None:
    with pytest.raises(MaxRetryError):
        bounded_retry(3).increment("GET", NODES, error=SSLError("wrong version number"))


def test_a_status_is_never_retried_even_with_retry_after() -> None:
    throttled = HTTPResponse(status=429, headers={"Retry-After": "1"}, preload_content=True)
    with pytest.raises(MaxRetryError):
        bounded_retry(3).increment("GET", NODES, response=throttled)
    assert not bounded_retry(3).raise_on_status  # the connection pool returns it as it is


def test_a_redirect_is_never_followed() -> None:
    moved = HTTPResponse(status=302, headers={"Location": "/login"}, preload_content=True)
    with pytest.raises(MaxRetryError):
        bounded_retry(3).increment("GET", NODES, response=moved)


def test_retries_are_sent_at_once_without_a_pause_between() -> None:
    r = bounded_retry(3)
    for _ in range(3):
        r = r.increment("GET", NODES, error=read_timeout())
        assert r.get_backoff_time() == 0


# --- from_config: the official client against a real local server -----------------------


def test_a_get_to_a_server_that_drops_connections_is_sent_once_plus_the_one_retry() -> None:
    assert RETRIES == 1
    with local_server() as (url, b):
        b.drop.add(NODES)
        with pytest.raises(Unavailable, match="did not answer list_node"):
            OfficialKubeApi.from_config(url).list_nodes()
        assert b.count("GET", NODES) == 2


@pytest.mark.parametrize("retries", [0, 2])
def test_a_get_is_sent_retries_plus_one_times_with_no_pause(retries: int) -> None:
    with local_server() as (url, b):
        b.drop.add(NODES)
        t0 = time.monotonic()
        with pytest.raises(Unavailable):
            OfficialKubeApi.from_config(url, retries=retries).list_nodes()
        assert b.count("GET", NODES) == retries + 1
        assert time.monotonic() - t0 < 1.5


def test_an_eviction_that_met_a_dropped_connection_is_never_resent() -> None:
    with local_server() as (url, b):
        b.drop.add(EVICTION)
        with pytest.raises(Unavailable, match="did not answer create_namespaced_pod_eviction"):
            OfficialKubeApi.from_config(url, retries=3).evict("ml", "train-0")
        assert b.count("POST", EVICTION) == 1


def test_a_silent_server_is_given_up_on_after_the_timeout_and_one_retry() -> None:
    with local_server() as (url, b):
        b.stall[NODES] = 3.0
        t0 = time.monotonic()
        with pytest.raises(Unavailable, match=r"did not answer list_node within 0\.3 s"):
            OfficialKubeApi.from_config(url, timeout=0.3).list_nodes()
        assert time.monotonic() - t0 < 2.0
        assert b.count("GET", NODES) == 2


@pytest.mark.parametrize("status", [429, 503])
def test_a_throttled_get_is_returned_at_once_not_waited_on_and_resent(status: int) -> None:
    with local_server() as (url, b):
        b.answers[NODES] = (status, {"Retry-After": "1"})
        with pytest.raises(ApiException) as e:
            OfficialKubeApi.from_config(url).list_nodes()
        assert e.value.status == status
        assert b.count("GET", NODES) == 1


def test_a_redirect_is_unavailable_and_not_followed() -> None:
    with local_server() as (url, b):
        b.answers[NODES] = (302, {"Location": "/login"})
        with pytest.raises(Unavailable):
            OfficialKubeApi.from_config(url).list_nodes()
        assert [p for _, p, _ in b.seen] == [NODES]


def test_a_client_built_without_a_timeout_waits_ten_seconds_per_call() -> None:
    api = OfficialKubeApi.from_config("https://kube.test:6443")
    wire = Wire()
    api.core.api_client.rest_client = wire
    api.list_nodes()
    assert wire.last.timeout == 10.0


def test_without_a_service_account_the_client_is_the_kubeconfigs_read_when_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with local_server() as (url, b):
        cfg = tmp_path / "kubeconfig"
        cfg.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: lab, cluster: {{server: "{url}"}}}}]
users: [{{name: ops, user: {{token: ops-token}}}}]
contexts: [{{name: lab, context: {{cluster: lab, user: ops}}}}]
current-context: lab
""")
        monkeypatch.setenv("KUBECONFIG", str(cfg))
        assert OfficialKubeApi.from_config().list_nodes() == []
        assert b.seen == [("GET", NODES, "Bearer ops-token")]


def test_in_a_pod_the_client_is_the_service_accounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))  # not read in a pod
    api = OfficialKubeApi.from_config()
    wire = Wire()
    api.core.api_client.rest_client = wire
    api.list_nodes()
    assert (wire.last.host, wire.last.path) == ("https://10.96.0.1:443", NODES)
    assert wire.last.headers["authorization"] == "bearer sa-token"
