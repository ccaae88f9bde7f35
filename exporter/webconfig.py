"""The Prometheus exporter-toolkit web configuration file: TLS and basic auth for /metrics.

Format: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md
(``tls_server_config``: cert_file, key_file, client_auth_type, client_ca_file, min_version;
``basic_auth_users``: user -> bcrypt hash). Parsed and checked at start-up; a bad file stops
the start with a one-line reason. Sits at the exporter's HTTP edge.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_KNOWN = {"tls_server_config", "basic_auth_users", "http_server_config"}


class WebConfigError(ValueError):
    """The web config file cannot be used; the message says why, in one line."""


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    _verified: set[bytes] = field(default_factory=set)

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def check_authorization(self, header: str | None) -> bool:
        """True when ``header`` is valid Basic credentials (or no users are configured).

        bcrypt costs ~0.1 s per check at the usual cost factor, so a verified pair is
        remembered by its SHA-256 (as exporter-toolkit caches too) and scrapes stay cheap.
        """
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            bcrypt.checkpw(b"x", _DUMMY)  # same cost for unknown users: no user enumeration
            return False
        key = hashlib.sha256(user.encode() + b"\0" + password.encode() + b"\0" + hashed).digest()
        if any(hmac.compare_digest(key, k) for k in self._verified):
            return True
        if bcrypt.checkpw(password.encode(), hashed):
            self._verified.add(key)
            return True
        return False


_DUMMY = bcrypt.hashpw(b"dummy", bcrypt.gensalt(rounds=4))


def _tls(cfg: dict[str, Any], base: Path) -> ssl.SSLContext:
    def path(key: str) -> Path:
        p = Path(str(cfg[key]))
        return p if p.is_absolute() else base / p

    if not cfg.get("cert_file") or not cfg.get("key_file"):
        raise WebConfigError("tls_server_config needs both cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(path("cert_file"), path("key_file"))
    except (OSError, ssl.SSLError) as e:
        raise WebConfigError(f"tls_server_config: cannot load cert/key: {e}") from None
    auth = cfg.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(f"tls_server_config.client_auth_type: unknown {auth!r}")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if cfg.get("client_ca_file"):
        try:
            ctx.load_verify_locations(path("client_ca_file"))
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(f"tls_server_config.client_ca_file: {e}") from None
    elif auth in ("RequireAndVerifyClientCert", "VerifyClientCertIfGiven"):
        raise WebConfigError(f"client_auth_type {auth} needs client_ca_file")
    min_version = cfg.get("min_version", "TLS12")
    if min_version not in _TLS_VERSIONS:
        raise WebConfigError(f"tls_server_config.min_version: unknown {min_version!r}")
    ctx.minimum_version = _TLS_VERSIONS[min_version]
    return ctx


def _users(raw: Any) -> dict[str, bytes]:
    if not isinstance(raw, dict):
        raise WebConfigError("basic_auth_users must map user names to bcrypt hashes")
    out: dict[str, bytes] = {}
    for user, hashed in raw.items():
        h = str(hashed).encode()
        if not h.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash")
        out[str(user)] = h
    return out


def load_web_config(path: str | Path) -> WebConfig:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as e:
        raise WebConfigError(f"--web-config {p}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise WebConfigError(
            f"--web-config {p}: not valid YAML ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(data, dict):
        raise WebConfigError(f"--web-config {p}: expected a mapping")
    unknown = set(data) - _KNOWN
    if unknown:
        raise WebConfigError(f"--web-config {p}: unknown key(s) {', '.join(sorted(unknown))}")
    tls = data.get("tls_server_config")
    return WebConfig(
        ssl_context=_tls(tls, p.parent) if tls else None,
        users=_users(data["basic_auth_users"]) if data.get("basic_auth_users") else {},
    )
