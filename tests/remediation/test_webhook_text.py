"""Bad text on the webhook (valid JSON all the same): a lone UTF-16 surrogate, NUL, control
characters. In a label (identity) it is a 400 with the reason; in an annotation (prose) it
is stored safely as U+FFFD; never a 5xx, which would make Alertmanager retry forever."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient

from remediation.service import Service
from tests.remediation.helpers import AUTH, alert, payload


def with_label(value: str, where: str = "labels") -> bytes:
    body = json.loads(payload(alert("gpu-node-003")))
    body["alerts"][0][where]["note" if where == "annotations" else "extra"] = value
    return json.dumps(body).encode()  # json.dumps escapes the surrogate: valid JSON


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b", "x\x1by", "\udfff tail", "\x85"])
async def test_bad_text_in_a_label_gets_400_with_the_reason_and_changes_nothing(
    svc_client: tuple[Service, TestClient], bad: str
) -> None:
    svc, client = svc_client
    r = await client.post("/alertmanager", data=with_label(bad), headers=AUTH)
    assert r.status == 400
    assert "U+" in (await r.json())["error"]
    assert svc.journal.rows("SELECT * FROM alerts") == []


async def test_bad_text_in_an_annotation_is_stored_safely(
    svc_client: tuple[Service, TestClient],
) -> None:
    svc, client = svc_client
    r = await client.post(
        "/alertmanager", data=with_label("ok\ud800\x00 end\n", "annotations"), headers=AUTH
    )
    assert r.status == 200
    assert len(svc.journal.rows("SELECT * FROM alerts")) == 1


async def test_a_surrogate_in_a_label_name_is_a_400_not_a_500(
    svc_client: tuple[Service, TestClient],
) -> None:
    _, client = svc_client
    body = json.loads(payload(alert("gpu-node-003")))
    body["alerts"][0]["labels"]["\ud800"] = "x"
    r = await client.post("/alertmanager", data=json.dumps(body).encode(), headers=AUTH)
    assert r.status == 400
