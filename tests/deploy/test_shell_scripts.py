"""The shipped shell scripts pass shellcheck (installed by `make system-deps`)."""

from __future__ import annotations

import subprocess

from tests.deploy.support import ROOT
from tests.realcomp import require_binary

SCRIPTS = sorted([*(ROOT / "deploy").rglob("*.sh"), *(ROOT / "tests/deploy").glob("*.sh")])


def test_shellcheck_finds_nothing_in_the_slurm_prolog_and_epilog() -> None:
    shellcheck = require_binary("shellcheck")
    assert {p.name for p in SCRIPTS} >= {"prolog.sh", "epilog.sh"}
    out = subprocess.run(
        [shellcheck, "--shell=sh", *map(str, SCRIPTS)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout
