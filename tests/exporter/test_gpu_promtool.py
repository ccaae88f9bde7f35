"""A healthy 8-GPU node's GPU exposition passes the real ``promtool check metrics`` lint."""

from __future__ import annotations

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.exposition import render
from simulator.nvml_fake import hgx_node, nvml_error
from tests.realcomp import promtool


def test_healthy_hgx_node_exposition_is_promtool_clean() -> None:
    body = render(GpuCollector(hgx_node("h100", seed="n1"), "n1").collect())
    assert body.count(f"{c.GPU_UP.name}{{".encode()) == 8
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stderr.decode()


def test_node_with_a_lost_and_a_failing_gpu_is_promtool_clean() -> None:
    nvml = hgx_node("h200", seed="n2")
    col = GpuCollector(nvml, "n2")
    col.collect()
    nvml.gpus[4].lost = True
    nvml.gpus[2].failing["power"] = nvml_error(999)
    body = render(col.collect())
    assert b'reason="gpu_lost"' in body
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stderr.decode()


def test_dcgm_compat_rendering_parses_and_breaks_only_dcgm_naming_rules() -> None:
    # dcgm-exporter's own names use camelCase labels and counters without _total (and one named
    # _COUNTER); promtool
    # lints those (rc 3) but must still parse the text (rc 1 would be a format error).
    body = render(GpuCollector(hgx_node("h100"), "n3").collect(), dcgm=True)
    assert f"{c.GPU_TEMPERATURE.dcgm[0].name}{{".encode() in body
    result = promtool("check", "metrics", stdin=body)
    problems = set(result.stderr.decode().splitlines())
    assert result.returncode in (0, 3), problems
    assert all(p.split()[0] in c.dcgm_names() for p in problems), problems
    naming = ("camelCase", '"_total" suffix', "should not include type 'counter'")
    assert all(any(n in p for n in naming) for p in problems), problems
