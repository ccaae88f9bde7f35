"""The exporter-toolkit web config: parsed at start-up, TLS and basic auth over real HTTPS."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from exporter.webconfig import WebConfigError, load_web_config
from tests.realcomp import free_port, self_signed_cert, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_accepts_the_right_password_and_rejects_others(tmp_path: Path) -> None:
    h = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prom: '{h}'\n")
    wc = load_web_config(tmp_path / "web.yml")
    assert wc.check_authorization(_basic("prom", "s3cret"))
    assert wc.check_authorization(_basic("prom", "s3cret"))  # cached path
    assert not wc.check_authorization(_basic("prom", "wrong"))
    assert not wc.check_authorization(_basic("eve", "s3cret"))
    assert not wc.check_authorization("Basic !!!notbase64")
    assert not wc.check_authorization(None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("basic_auth_users:\n  prom: plaintext\n", "not a bcrypt hash"),
        (
            "tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.key\n",
            "cannot load cert/key",
        ),
        ("tls_server_config:\n  cert_file: a.pem\n", "needs both cert_file and key_file"),
        ("bogus: 1\n", "unknown key(s) bogus"),
        ("- a list\n", "expected a mapping"),
        ("basic_auth_users: [\n", "not valid YAML"),
    ],
)
def test_a_bad_web_config_is_refused_with_a_reason(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "web.yml").write_text(text)
    with pytest.raises(WebConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_web_config(tmp_path / "web.yml")


@pytest.fixture(scope="module")
def https_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = self_signed_cert(d)
    h = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (d / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
        f"basic_auth_users:\n  prom: '{h}'\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--source",
            "nvml",
            "--node",
            "tls-node",
            "--listen",
            f"127.0.0.1:{port}",
            "--web-config",
            str(d / "web.yml"),
            "--sysfs-root",
            str(ROOT / "fixtures" / "sys"),
            "--kmsg",
            str(d / "empty.log"),
            "--interval",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=2),
            20,
            0.1,
            "https exporter",
        )
        yield url, cert
    finally:
        proc.terminate()
        proc.wait(10)


def _get(url: str, cert: Path, auth: str | None) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(cert))
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.real
def test_metrics_over_real_https_need_the_right_basic_auth(
    https_exporter: tuple[str, Path],
) -> None:
    url, cert = https_exporter
    assert _get(f"{url}/metrics", cert, None)[0] == 401
    assert _get(f"{url}/metrics", cert, _basic("prom", "nope"))[0] == 401
    status, body = _get(f"{url}/metrics", cert, _basic("prom", "s3cret"))
    assert status == 200
    assert b'node="tls-node"' in body


@pytest.mark.real
def test_plain_http_to_the_tls_port_gets_no_metrics(https_exporter: tuple[str, Path]) -> None:
    url, _ = https_exporter
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url.replace("https", "http") + "/metrics", timeout=3).read()


def test_the_plain_http_edge_answers_get_head_404_and_keeps_the_connection() -> None:
    import http.client
    import threading

    from exporter.collection import CollectionLoop
    from exporter.server import MetricsServer

    loop = CollectionLoop([], "edge", source="t", interval=5)
    loop.run_once()
    server = MetricsServer(loop, 60, None, ("127.0.0.1", 0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        for method, path, status in (
            ("GET", "/metrics", 200),
            ("HEAD", "/metrics", 200),
            ("GET", "/healthz", 200),
            ("GET", "/nope", 404),
            ("GET", "/metrics", 200),  # the same connection, still open
        ):
            conn.request(method, path)
            r = conn.getresponse()
            body = r.read()
            assert r.status == status, (method, path)
            if method == "HEAD":
                assert body == b"" and int(r.headers["Content-Length"]) > 0
            elif path == "/metrics":
                assert b'node="edge"' in body
    finally:
        server.shutdown()
        server.server_close()
