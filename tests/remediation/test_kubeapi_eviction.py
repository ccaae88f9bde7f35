"""An eviction's answer in the server's words: ``Eviction.from_status`` over the bodies an
API server (a metav1.Status, as in the policy/v1 Eviction docs:
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/) or a proxy in front
of it (an HTML page, nothing) sends, and ``why``, the one line the log and node API show."""

from __future__ import annotations

import json

from remediation.backends.kubeapi import Eviction

BUDGET = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {"causes": [{"reason": "DisruptionBudget",
                            "message": "The disruption budget train needs 4 healthy pods and "
                                       "has 4 currently"}]},
    "code": 429,
}  # fmt: skip


def test_a_status_body_gives_reason_message_and_cause_messages_in_bytes_or_text() -> None:
    want = Eviction(
        429, "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        ("The disruption budget train needs 4 healthy pods and has 4 currently",),
    )  # fmt: skip
    assert Eviction.from_status(429, json.dumps(BUDGET).encode()) == want
    assert Eviction.from_status(429, json.dumps(BUDGET)) == want


def test_undecodable_bytes_are_replaced_not_raised() -> None:
    out = Eviction.from_status(502, b"<html>bad \xff gateway</html>")
    assert out == Eviction(502, "", "<html>bad \ufffd gateway</html>")


def test_no_body_is_a_bare_status() -> None:
    assert Eviction.from_status(429, None) == Eviction(429)
    assert Eviction.from_status(429, b"") == Eviction(429)
    assert Eviction.from_status(500, "") == Eviction(500)


def test_a_body_that_is_not_json_is_kept_as_the_message_stripped_and_cut_to_300() -> None:
    page = "  <html>" + "x" * 400 + "</html>\n"
    out = Eviction.from_status(503, page)
    assert (out.status, out.reason, out.causes) == (503, "", ())
    assert out.message == ("<html>" + "x" * 400)[:300]
    assert len(out.message) == 300


def test_json_that_is_not_an_object_is_kept_as_the_message_stripped_and_cut_to_300() -> None:
    assert Eviction.from_status(500, ' ["a", "b"] ') == Eviction(500, "", '["a", "b"]')
    long = json.dumps(["y" * 400])
    out = Eviction.from_status(500, long)
    assert (out.status, out.reason, out.message) == (500, "", long[:300])


def test_a_status_without_reason_or_message_has_empty_ones() -> None:
    assert Eviction.from_status(429, b'{"kind": "Status"}') == Eviction(429, "", "", ())
    assert Eviction.from_status(429, b'{"reason": null, "message": null, "details": null}') == (
        Eviction(429, "", "", ())
    )


def test_only_causes_with_a_message_are_kept() -> None:
    body = {"details": {"causes": [{"reason": "FieldValueInvalid"}, "not an object",
                                   {"message": ""}, {"message": "kept"}]}}  # fmt: skip
    assert Eviction.from_status(429, json.dumps(body)).causes == ("kept",)


def test_done_is_evicted_deleted_or_already_gone() -> None:
    assert [s for s in (200, 201, 404, 409, 429, 500) if Eviction(s).done] == [200, 201, 404]


def test_why_is_status_reason_message_and_causes_on_one_line() -> None:
    e = Eviction(429, "TooManyRequests", " Cannot evict pod. ", (" budget train ", "  "))
    assert e.why() == "HTTP 429 TooManyRequests: Cannot evict pod. budget train"


def test_why_without_words_is_the_bare_status() -> None:
    assert Eviction(201).why() == "HTTP 201"
    assert Eviction(429, "TooManyRequests").why() == "HTTP 429 TooManyRequests"
    assert Eviction(500, "", "  ").why() == "HTTP 500"
    assert Eviction(503, "", "", ("upstream down",)).why() == "HTTP 503: upstream down"
