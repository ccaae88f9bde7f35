"""`gpuwarden-exporter` / `python -m exporter`: start the per-node agent.

Settings are validated first; a bad flag, environment value, config file or web config
stops the start with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from common.settings import SettingsError, load
from exporter import __version__
from exporter.collection import CollectionLoop
from exporter.settings import ExporterSettings, parse_listen
from exporter.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger("gpuwarden.exporter")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuwarden-exporter",
        description="Per-node GPU, NVLink, InfiniBand and XID exporter for Prometheus.",
        epilog="Every flag can also be set as GPUWARDEN_<FLAG> (e.g. GPUWARDEN_INTERVAL=5) or "
        "in the --config YAML file (keys as flag names). Flags win over env over file.",
    )
    a = p.add_argument
    a("--listen", help="HOST:PORT to serve /metrics and /healthz (default 0.0.0.0:9835)")
    a("--node", help="node name put on every series (default: short hostname)")
    a(
        "--source",
        choices=["auto", "nvml", "amdsmi", "simulated"],
        help="GPU source: nvml (NVIDIA), amdsmi (AMD Instinct, needs the amdsmi module), "
        "simulated; auto (default) picks amdsmi where the amdsmi module is installed, else nvml",
    )
    a("--sysfs-root", help="sysfs root for InfiniBand (default /sys)")
    a(
        "--kmsg",
        help="kernel log: /dev/kmsg, or a file in kmsg/dmesg/journal format "
        "followed like tail -F (default /dev/kmsg)",
    )
    a(
        "--kmsg-state",
        help="file that keeps XID counts and the kernel-log position across restarts "
        "(default: none)",
    )
    a(
        "--kmsg-backlog",
        help="seconds: with no usable --kmsg-state, /dev/kmsg records logged longer than this "
        "before the start are not counted (default 600)",
    )
    a("--compat", help="also render dcgm-exporter's names and labels: dcgm (its 3.x-4.8 names), "
      "dcgm:4.9 or dcgm:4.10 (those releases' renamed fields and base units), dcgm:VERSION")  # fmt: skip
    a(
        "--hostname-label",
        choices=["Hostname", "hostname"],
        help="dcgm compat: the host label's name, Hostname (dcgm-exporter 3.x, default) "
        "or hostname (4.x)",
    )
    a(
        "--kubelet-socket",
        help="attribute GPUs to pods through the kubelet pod-resources API on this socket "
        "(usually /var/lib/kubelet/pod-resources/kubelet.sock; default: off)",
    )
    a(
        "--kubernetes-pod-labels",
        action="store_const",
        const=True,
        help="dcgm compat: also put pod/namespace/container on every allocated GPU's dcgm "
        "series, as dcgm-exporter --kubernetes does (needs --kubelet-socket)",
    )
    a(
        "--kubernetes-virtual-gpus",
        action="store_const",
        const=True,
        help="dcgm compat, with --kubernetes-pod-labels: one copy of a shared (time-sliced, MPS) "
        "GPU's series per sharing pod, labelled vgpu, as dcgm-exporter --kubernetes-virtual-gpus "
        "does; with --gpu-processes its GPU_UTIL and FB_USED copies are the pod's own use",
    )
    a(
        "--gpu-processes",
        action="store_const",
        const=True,
        help="per-pod memory, SM time and process count on each GPU (shared GPUs: time-slicing, "
        "MPS) from NVML's process lists, each process joined to its pod through its cgroup; "
        "needs the host's pid namespace (hostPID) and the kubelet's /var/log (default: off)",
    )
    a("--proc-root", help="the host's /proc, for --gpu-processes (default /proc)")
    a(
        "--pod-log-root",
        help="the node's /var/log with the kubelet's containers/ and pods/, for --gpu-processes "
        "(default /var/log)",
    )
    a(
        "--dcgm-hostengine",
        help="HOST:PORT of a DCGM host engine (nv-hostengine) serving profiling fields for GPUs "
        "without NVML GPM (pre-Hopper); needs DCGM's Python bindings (default: off)",
    )
    a("--web-config", help="exporter-toolkit web config file (TLS, basic auth)")
    a("--job-map-dir", help="directory the Slurm prolog/epilog fill (GPU index -> job id)")
    a("--step-dir", help="directory training jobs publish step times to (checkpoint.publish_step)")
    a(
        "--interval",
        help="seconds between collection cycles (default 15, Prometheus' scrape interval; "
        "set it to yours)",
    )
    a(
        "--stale-after",
        help="seconds without a cycle before /healthz says 503 (default 3 intervals, at least 15)",
    )
    a("--seed", help="seed of the simulated source (default 0)")
    a(
        "--storage-mounts",
        help="comma-separated checkpoint mounts to probe (stat, small write + fsync, read) "
        "in a child process each, so a hung mount never blocks the exporter",
    )
    a("--storage-probe-timeout", help="seconds before a probe counts as hung (default 10)")
    a("--storage-probe-interval", help="seconds between storage probes (default 30)")
    a("--config", help="YAML file with any of the settings above")
    a("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    a("--version", action="version", version=f"gpuwarden-exporter {__version__}")
    return p


def settings_from(argv: Sequence[str]) -> tuple[ExporterSettings, WebConfig | None, str]:
    ns = build_parser().parse_args(list(argv))
    flags = {k: v for k, v in vars(ns).items() if k not in ("config", "log_level")}
    settings = load(ExporterSettings, flags, config_file=ns.config)
    web_config = load_web_config(settings.web_config) if settings.web_config else None
    return settings, web_config, ns.log_level


def serve(
    loop: CollectionLoop,
    settings: ExporterSettings,
    web_config: WebConfig | None,
    stop: threading.Event,
) -> None:
    """Serve until ``stop`` is set (SIGINT/SIGTERM); OSError when the address is unusable."""
    from exporter.server import MetricsServer

    host, port = parse_listen(settings.listen)
    server = MetricsServer(loop, settings.stale_seconds, web_config, (host, port))
    scheme = "https" if web_config and web_config.ssl_context else "http"
    log.info("serving %s://%s:%d/metrics for node %s", scheme, host, port, settings.node)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    try:
        while not stop.wait(1.0):  # a timed wait: signal handlers run between the waits
            pass
    finally:
        server.shutdown()
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        settings, web_config, level = settings_from(args)
    except (SettingsError, WebConfigError) as e:
        print(f"gpuwarden-exporter: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        from exporter.assemble import assemble

        assembly = assemble(settings)
    except (OSError, ValueError) as e:
        print(
            f"gpuwarden-exporter: cannot start the {settings.source} source: {e}", file=sys.stderr
        )
        return 2
    loop = CollectionLoop(
        assembly.collectors,
        settings.node,
        source=settings.source,
        interval=settings.interval,
        dcgm=settings.dcgm,
        dcgm_generation=settings.dcgm_generation,
        hostname_label=settings.hostname_label,
        pod_labels=settings.kubernetes_pod_labels,
        virtual_gpus=settings.kubernetes_virtual_gpus,
        before_cycle=assembly.before_cycle,
    )
    loop.start()

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(loop, settings, web_config, stop)
    except OSError as e:
        print(f"gpuwarden-exporter: cannot listen on {settings.listen}: {e}", file=sys.stderr)
        return 2
    finally:
        loop.stop()
    return 0
