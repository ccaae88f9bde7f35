"""Slurm 21.08 to 24.11 state formats (fixtures/slurm/, origin in each file's ``_source``):
a drained node is never read as in service, whatever the shape of its state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from remediation.backends.runner import Result
from remediation.backends.slurm import SlurmBackend

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "slurm").glob("*.json"))


class Recorded:
    """Answers sinfo/squeue --json with one recorded version's output."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        return Result(0, json.dumps(self.data[argv[0]]), "")


def test_every_version_from_21_08_to_24_11_has_a_fixture() -> None:
    versions = {f.stem for f in FIXTURES}
    assert {"21.08", "21.08-plus-flags", "22.05", "23.02", "23.11", "24.05", "24.11"} <= versions
    for f in FIXTURES:
        assert json.loads(f.read_text())["_source"], f


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.stem)
def test_a_drained_node_is_never_read_as_in_service(fixture: Path) -> None:
    b = SlurmBackend(Recorded(json.loads(fixture.read_text())))
    fleet = {n.name: n for n in b.fleet()}
    ours = fleet["gpu-node-001"]
    assert ours.out_of_service and ours.ours and b.is_taken_out("gpu-node-001")
    assert not fleet["gpu-node-002"].out_of_service
    if "gpu-node-004" in fleet:  # the four-node scenario: a foreign drain and a down node
        assert fleet["gpu-node-003"].out_of_service and not fleet["gpu-node-003"].ours
        assert fleet["gpu-node-004"].out_of_service and not fleet["gpu-node-004"].ours


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.stem)
def test_job_states_and_holds_read_the_same_in_every_version(fixture: Path) -> None:
    b = SlurmBackend(Recorded(json.loads(fixture.read_text())))
    running, held = b.job("1"), b.job("2")
    assert running is not None and running.state == "RUNNING" and not running.held
    assert "gpu-node-002" in running.nodes
    assert held is not None and held.state == "PENDING" and held.held
    assert [j.job_id for j in b.jobs_on("gpu-node-002")] == ["1"]
