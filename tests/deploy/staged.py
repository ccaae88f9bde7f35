"""Follow docs/deploy.md on a staged root: its shell blocks, a stand-in systemctl, the units.

The guide's commands run one line at a time under bash, as root, in the unpacked sdist, with
two mechanical changes and nothing else:

- absolute paths the guide installs to (``/etc/``, ``/opt/gpuwarden``, ``/shared/``,
  ``/var/lib/gpuwarden``, ``/run/credentials/``, ``/tmp/``) are moved under the staged root,
  in the commands and, after each line, inside the configuration files it installed under
  ``<root>/etc`` (the unit files are left as written: ``systemd-analyze verify --root`` reads
  them, and the stand-in maps their paths when it starts them);
- the well-known ports (9090 Prometheus, 9093 Alertmanager, 9836 remediation, 9837 analyzer)
  become free ones, so that tests running at the same time cannot collide.

``systemctl`` on the PATH only records its arguments; after each line :class:`Machine` does
what systemd would: starts a unit's ExecStart with its EnvironmentFile, $VAR expansion,
LoadCredential (copied to ``<root>/run/credentials/<unit>/``, owned by the service user),
StateDirectory and User/DynamicUser (as ``nobody``). ``prometheus`` and
``prometheus-alertmanager`` are the Debian services, started on the staged /etc/prometheus.
What it does not emulate: the sandboxing (ProtectSystem and friends), which
``systemd-analyze verify`` and the unit tests check instead.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.realcomp import require_binary

MOVED = ("/etc/", "/opt/gpuwarden", "/shared/", "/var/lib/gpuwarden", "/run/credentials/")
PORTS = (9090, 9093, 9836, 9837)
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def sh_blocks(markdown: str, heading: str) -> list[str]:
    """The ```sh blocks of the section under ``heading`` (up to the next heading)."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    level = heading.split(" ", 1)[0]
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#") and len(lines[i].split(" ", 1)[0]) <= len(level)
        ),
        len(lines),
    )
    blocks, current = [], None
    for line in lines[start + 1 : end]:
        if current is None and line.strip() == "```sh":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def command_lines(block: str) -> list[str]:
    """One shell command per line, backslash continuations joined, comments kept (bash)."""
    out, acc = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            acc += line.rstrip()[:-1] + " "
            continue
        out.append(acc + line)
        acc = ""
    return [c for c in out if c.strip()]


def find_unit_value(unit: str, key: str) -> list[str]:
    values = []
    for raw in unit.splitlines():
        k, sep, v = raw.strip().partition("=")
        if sep and not raw.lstrip().startswith("#") and k.strip() == key:
            values.append(v.strip())
    return values


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    if not path.exists():
        return env
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, _, v = line.partition("=")
        env[k.strip()] = shlex.split(v)[0] if v.strip() else ""
    return env


def expand_exec(cmd: str, env: dict[str, str]) -> list[str]:
    """systemd's ExecStart expansion: ${VAR} stays one word, a lone $VAR splits on spaces."""
    out = []
    for word in shlex.split(cmd):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            out += env.get(word[1:], "").split()
        else:
            out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m[1], ""), word))
    return out


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Machine:
    root: Path
    ports: dict[int, int]
    extra_env: dict[str, str] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    after_line: list[tuple[str, Callable[[], None]]] = field(default_factory=list)

    # ------------------------------------------------------------------ relocation
    def move(self, text: str, *, tmp: bool = False) -> str:
        alternation = "|".join(re.escape(p) for p in MOVED) + (r"|/tmp(?=/|\s|$)" if tmp else "")
        text = re.sub(rf"(?<![\w.])({alternation})", lambda m: f"{self.root}{m[1]}", text)
        for old, new in self.ports.items():
            text = re.sub(rf"(127\.0\.0\.1|localhost):{old}\b", rf"\g<1>:{new}", text)
        return text

    def relocate_configs(self) -> None:
        etc = self.root / "etc"
        for path in etc.rglob("*"):
            if not path.is_file() or (etc / "systemd") in path.parents:
                continue
            if path.name.endswith("webhook-token"):
                continue
            text = path.read_text()
            moved = self.move(text)
            if moved != text:
                path.write_text(moved)

    # ------------------------------------------------------------------ running the guide
    def run(self, line: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        bindir = self.root / "fakebin"
        env = {
            "PATH": f"{bindir}:{SYSTEM_PATH}",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "SYSTEMCTL_LOG": str(self.root / "systemctl.log"),
            **self.extra_env,
        }
        cmd = self.move(line, tmp=True)
        p = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", cmd],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"{cmd!r}: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
        self.relocate_configs()
        for needle, hook in self.after_line:
            if needle in line:
                hook()
        self.systemctl_requests()
        return p

    def install_fakebin(self) -> None:
        bindir = self.root / "fakebin"
        bindir.mkdir(exist_ok=True)
        stub = bindir / "systemctl"
        stub.write_text('#!/bin/sh\necho "$*" >> "$SYSTEMCTL_LOG"\n')
        stub.chmod(0o755)

    def systemctl_requests(self) -> None:
        log = self.root / "systemctl.log"
        if not log.exists():
            return
        requests = log.read_text().splitlines()
        log.unlink()
        for req in requests:
            words = req.split()
            verb, units = words[0], [w for w in words[1:] if not w.startswith("--")]
            if verb == "daemon-reload":
                continue
            for unit in units:
                unit = unit.removesuffix(".service")
                if verb == "enable" and "--now" not in words:
                    continue
                if verb in ("restart", "stop"):
                    self.stop(unit)
                if verb == "reload" and unit in self.services:
                    self._http_post(f"http://127.0.0.1:{self.ports[9090]}/-/reload")
                    continue
                if verb != "stop":
                    self.start(unit)

    # ------------------------------------------------------------------ units
    def start(self, unit: str) -> None:
        if unit in self.services and self.services[unit].proc.poll() is None:
            return
        if unit == "gpuwarden-exporter":
            return  # no GPUs here: the simulator plays the GPU nodes
        if unit == "prometheus":
            self._start_prometheus()
        elif unit == "prometheus-alertmanager":
            self._start_alertmanager()
        else:
            self._start_unit(unit)

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str], user: str | None, ready: str
    ) -> None:
        logdir = self.root / "log"
        logdir.mkdir(exist_ok=True)
        log = logdir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd="/",
                user=user,
                group=pwd.getpwnam(user).pw_gid if user else None,
                extra_groups=[] if user else None,
                start_new_session=True,
            )
        self.services[name] = Service(name, proc, log)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=1) as r:
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"{name} not ready at {ready}:\n{log.read_text()[-3000:]}")

    def _start_prometheus(self) -> None:
        etc, port = self.root / "etc" / "prometheus", self.ports[9090]
        argv = [
            require_binary("prometheus"),
            f"--config.file={etc / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.root / 'var/lib/prometheus'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        self._spawn("prometheus", argv, {"PATH": SYSTEM_PATH}, None,
                    f"http://127.0.0.1:{port}/-/ready")  # fmt: skip

    def _start_alertmanager(self) -> None:
        etc, port = self.root / "etc" / "prometheus", self.ports[9093]
        argv = [
            require_binary("prometheus-alertmanager"),
            f"--config.file={etc / 'alertmanager.yml'}",
            f"--storage.path={self.root / 'var/lib/alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
        self._spawn("prometheus-alertmanager", argv, {"PATH": SYSTEM_PATH}, None,
                    f"http://127.0.0.1:{port}/-/ready")  # fmt: skip

    def _start_unit(self, unit: str) -> None:
        text = (self.root / "etc/systemd/system" / f"{unit}.service").read_text()
        env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}
        for f in find_unit_value(text, "EnvironmentFile"):
            env.update(read_env_file(Path(self.move(f.lstrip("-")))))
        user = (find_unit_value(text, "User") or [None])[-1]
        if (find_unit_value(text, "DynamicUser") or ["no"])[-1] == "yes":
            user = "nobody"
        pw = pwd.getpwnam(user) if user else None
        creds = find_unit_value(text, "LoadCredential")
        if creds:
            cdir = self.root / "run" / "credentials" / f"{unit}.service"
            shutil.rmtree(cdir, ignore_errors=True)
            cdir.mkdir(parents=True)
            for c in creds:
                name, _, source = c.partition(":")
                shutil.copyfile(self.move(source), cdir / name)
                (cdir / name).chmod(0o400)
                if pw:
                    os.chown(cdir / name, pw.pw_uid, pw.pw_gid)
            cdir.chmod(0o500)
            if pw:
                os.chown(cdir, pw.pw_uid, pw.pw_gid)
            env["CREDENTIALS_DIRECTORY"] = str(cdir)
        for state in find_unit_value(text, "StateDirectory"):
            sdir = self.root / "var/lib" / state
            sdir.mkdir(parents=True, exist_ok=True)
            sdir.chmod(int((find_unit_value(text, "StateDirectoryMode") or ["0755"])[-1], 8))
            if pw:
                os.chown(sdir, pw.pw_uid, pw.pw_gid)
        (exec_start,) = find_unit_value(text, "ExecStart")
        argv = [self.move(a) for a in expand_exec(exec_start, env)]
        listen = argv[argv.index("--listen") + 1]
        path = "/healthz" if unit == "gpuwarden-remediation" else "/metrics"
        self._spawn(unit, argv, env, user, f"http://{listen}{path}")

    def stop(self, unit: str) -> None:
        svc = self.services.pop(unit, None)
        if svc is None or svc.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(svc.proc.pid, signal.SIGTERM)
        try:
            svc.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(svc.proc.pid, signal.SIGKILL)
            svc.proc.wait(5)

    def stop_all(self) -> None:
        for unit in reversed(list(self.services)):
            self.stop(unit)

    def log(self, unit: str) -> str:
        return (self.root / "log" / f"{unit}.log").read_text()

    @staticmethod
    def _http_post(url: str) -> None:
        req = urllib.request.Request(url, data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass


@contextlib.contextmanager
def machine(root: Path, ports: dict[int, int]) -> Iterator[Machine]:
    m = Machine(root, ports)
    m.install_fakebin()
    try:
        yield m
    finally:
        m.stop_all()
