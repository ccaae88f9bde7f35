"""The Containerfile, linted: what it copies is what `make dist` builds, its base is a pinned
Debian release, it installs into the units' /opt/gpuwarden and runs as non-root. The real
build (podman, from an mmdebstrap root file system) is `make image-test`
(tests/deploy/image_build.sh), outside `make test` because it downloads Debian packages."""

from __future__ import annotations

import re
import shlex
import tomllib

from tests.deploy.support import ROOT

FILE = ROOT / "Containerfile"
KNOWN = {"FROM", "ARG", "ENV", "RUN", "COPY", "USER", "LABEL"}


def instructions() -> list[tuple[str, str]]:
    out, acc = [], ""
    for raw in FILE.read_text().splitlines():
        if not acc and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            acc += raw.rstrip()[:-1] + " "
            continue
        line = (acc + raw).strip()
        acc = ""
        word, _, rest = line.partition(" ")
        out.append((word, rest.strip()))
    assert not acc, "a continuation runs off the end of the file"
    return out


def test_every_instruction_is_known_and_the_base_is_a_pinned_debian_release() -> None:
    ins = instructions()
    assert {w for w, _ in ins} <= KNOWN
    (base,) = [r for w, r in ins if w == "FROM"]
    assert ins[0][0] == "FROM"
    assert re.fullmatch(r"docker\.io/library/debian:(bookworm|trixie)-slim", base)


def test_it_copies_the_wheel_make_dist_builds_for_this_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    ins = instructions()
    args = dict(r.split("=", 1) for w, r in ins if w == "ARG" and "=" in r)
    assert args["VERSION"] == version
    (copy,) = [shlex.split(r) for w, r in ins if w == "COPY"]
    src = copy[0].replace("${VERSION}", version)
    assert src == f"dist/gpuwarden-{version}-py3-none-any.whl"
    assert "dist:" in (ROOT / "Makefile").read_text()


def test_it_installs_into_the_units_venv_checks_itself_and_runs_as_non_root() -> None:
    ins = instructions()
    runs = " ".join(r for w, r in ins if w == "RUN")
    assert "python3 -m venv /opt/gpuwarden" in runs
    assert "/opt/gpuwarden/bin/pip install" in runs
    assert "gpuwarden-remediation --check" in runs  # the installed package starts
    unit = (ROOT / "deploy/systemd/gpuwarden-remediation.service").read_text()
    assert "ExecStart=/opt/gpuwarden/bin/gpuwarden-remediation" in unit
    (user,) = [r for w, r in ins if w == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    env = " ".join(r for w, r in ins if w == "ENV")
    assert "PATH=/opt/gpuwarden/bin:" in env  # the manifests' `command:` finds the entry points
