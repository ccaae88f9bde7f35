"""A local stack (demo, e2e tests) starts on a fresh block of loopback ports, and a port taken
between being found free and being bound costs a retry on a new block, not the test run."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwarden import stack as stack_mod
from gpuwarden.processes import StartError, free_port_block
from gpuwarden.stack import Stack, StackOptions, start_on_free_ports


def _blocks(first: int) -> Iterator[int]:
    yield first
    while True:
        yield free_port_block(5)


def test_a_stack_whose_port_is_taken_starts_again_on_a_new_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    blocks = _blocks(port - 2)  # the remediation service's port (base + 2) is the taken one
    monkeypatch.setattr(stack_mod, "free_port_block", lambda n: next(blocks))
    s = start_on_free_ports(StackOptions(workdir=tmp_path, nodes=2, real_servers=False), tries=3)
    try:
        assert s.opts.base_port != port - 2
        assert not s.urls.remediation.endswith(f":{port}")
    finally:
        s.stop()
        taken.close()


def test_a_start_that_fails_for_another_reason_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def boom(self: Stack) -> None:
        calls.append(self.opts.base_port)
        raise StartError("analyzer exited with 2: bad setting")

    monkeypatch.setattr(Stack, "start", boom)
    with pytest.raises(StartError, match="bad setting"):
        start_on_free_ports(StackOptions(workdir=tmp_path, real_servers=False))
    assert len(calls) == 1


def test_ports_taken_on_every_try_give_up_with_the_last_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def taken(self: Stack) -> None:
        calls.append(self.opts.base_port)
        raise StartError("simulator exited with 1: [Errno 98] Address already in use")

    monkeypatch.setattr(Stack, "start", taken)
    with pytest.raises(StartError, match="already in use"):
        start_on_free_ports(StackOptions(workdir=tmp_path, real_servers=False), tries=3)
    assert len(calls) == 3
