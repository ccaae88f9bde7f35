"""Webhook/API authentication: bearer token or basic auth, compared in constant time.

The secrets come from files or the environment, never the command line (they would show
in ``ps``). Sits in front of every POST /alertmanager and /api/v1/ request.
"""

from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass
from pathlib import Path

from common.settings import SettingsError


@dataclass(frozen=True)
class Credentials:
    token: str | None = None
    basic: tuple[str, str] | None = None  # (user, password)

    @property
    def expected(self) -> tuple[bytes, ...]:
        out = []
        if self.token:
            out.append(f"Bearer {self.token}".encode())
        if self.basic:
            pair = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            out.append(f"Basic {pair}".encode())
        return tuple(out)

    def check(self, header: str | None) -> bool:
        given = (header or "").strip().encode("utf-8", "replace")
        ok = False
        for want in self.expected:  # every candidate compared: no early exit
            ok |= hmac.compare_digest(given, want)
        return ok


MIN_TOKEN_BYTES = 32


def read_secret(path: Path, what: str) -> str:
    """A secret file: refused when group or others may read it (as ssh refuses a key)."""
    try:
        mode = path.stat().st_mode
        value = path.read_text().strip()
    except OSError as e:
        raise SettingsError(f"{what} {path}: {e.strerror or e}") from None
    if mode & 0o077:
        raise SettingsError(
            f"{what} {path}: readable by group or others (mode {mode & 0o777:o}); chmod 600 it"
        )
    if not value:
        raise SettingsError(f"{what} {path}: file is empty")
    return value


def check_token(token: str, where: str) -> None:
    if len(token.encode()) < MIN_TOKEN_BYTES:
        raise SettingsError(
            f"{where}: token is {len(token.encode())} bytes, need at least {MIN_TOKEN_BYTES} "
            "(e.g. openssl rand -hex 32)"
        )


def load(token: str | None, token_file: Path | None, basic_file: Path | None) -> Credentials:
    if token_file is not None:
        token = read_secret(token_file, "webhook token file")
        check_token(token, f"webhook token file {token_file}")
    elif token:
        check_token(token, "GPUWARDEN_WEBHOOK_TOKEN")
    basic = None
    if basic_file is not None:
        user, sep, password = read_secret(basic_file, "basic auth file").partition(":")
        if not sep or not user or not password:
            raise SettingsError(f"basic auth file {basic_file}: expected one line user:password")
        basic = (user, password)
    return Credentials(token or None, basic)
