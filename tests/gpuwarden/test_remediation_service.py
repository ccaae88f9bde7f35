"""The umbrella's remediation service carries failure accounting's series; the bare one does
not (remediation never imports accounting: gpuwarden/remediation_service.py wires it)."""

from pathlib import Path

from exporter import catalog as c
from gpuwarden import cli
from remediation.clock import FakeClock
from tests.accounting.helpers import service as accounting_service
from tests.remediation.helpers import service, topology_file


def test_gpuwarden_remediation_runs_the_service_with_accounting() -> None:
    assert cli.COMMANDS["remediation"][0] == "gpuwarden.remediation_service"


def test_the_umbrellas_service_serves_the_accounting_series_and_the_bare_one_does_not(
    tmp_path: Path,
) -> None:
    topology = topology_file(tmp_path, 2)
    wired = accounting_service(tmp_path, clock=FakeClock(1e9), topology=topology)
    assert c.ACCOUNTING_UNKNOWN_RECOMPUTE.name.encode() in wired.metrics.render()
    wired.journal.close()
    bare = service(tmp_path, clock=FakeClock(1e9), topology=topology)
    assert c.ACCOUNTING_UNKNOWN_RECOMPUTE.name.encode() not in bare.metrics.render()
    bare.journal.close()
