"""Where events go: an HTTP receiver behind a small Protocol (a fake beside it in tests).

One persistent HTTP/1.1 connection (reopened after any error; a send that fails on a
kept-alive connection is tried once more on a fresh one, since receivers close idle
connections), a POST per event, the answer's status or the transport error. No retries here: the relay decides what a failure
means (relay.py).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Reply:
    status: int | None  # None: no HTTP answer (refused, reset, timeout)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Sink(Protocol):
    def send(self, headers: dict[str, str], body: bytes) -> Reply: ...
    def close(self) -> None: ...


class HttpSink:
    def __init__(self, url: str, timeout_s: float = 10.0, token: str | None = None) -> None:
        self.url, self.timeout_s, self.token = url, timeout_s, token
        parts = urllib.parse.urlsplit(url)
        self.https, self.host, self.port = parts.scheme == "https", parts.hostname, parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            host = str(self.host)
            if self.https:
                self.conn = http.client.HTTPSConnection(
                    host, self.port, timeout=self.timeout_s, context=ssl.create_default_context()
                )
            else:
                self.conn = http.client.HTTPConnection(host, self.port, timeout=self.timeout_s)
        return self.conn

    def send(self, headers: dict[str, str], body: bytes) -> Reply:
        hdrs = dict(headers)
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        reused = self.conn is not None
        reply = self._post(hdrs, body)
        if reply.status is None and reused:
            # a kept-alive connection the receiver closed while idle (or across its restart):
            # once more on a fresh one before calling it a failure
            reply = self._post(hdrs, body)
        return reply

    def _post(self, hdrs: dict[str, str], body: bytes) -> Reply:
        try:
            conn = self._connect()
            conn.request("POST", self.path, body=body, headers=hdrs)
            resp = conn.getresponse()
            resp.read()
            if resp.will_close:
                self.close()
            return Reply(resp.status, "" if 200 <= resp.status < 300 else resp.reason)
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return Reply(None, f"{type(e).__name__}: {e}"[:300])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
