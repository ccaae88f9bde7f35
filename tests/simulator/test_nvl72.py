"""NVL72 racks through the exporter's own collectors, and the fabric rules over what they serve
(real promtool): a switch tray down is one alert naming the domain, one GPU's route unhealthy
is that GPU's alert, IMEX down on most trays is one domain alert."""

from __future__ import annotations

from pathlib import Path

import yaml

from exporter import catalog as c
from exporter.catalog import Sample
from simulator.nvl72 import GPUS_PER_TRAY, TRAYS, Nvl72Rack, scrape
from tests.realcomp import promtool

RULES = Path(__file__).resolve().parents[2] / "alerts" / "fabric.rules.yml"


def test_a_rack_is_18_trays_of_4_gpus_in_one_nvlink_domain() -> None:
    rack = Nvl72Rack.build(0)
    samples = scrape(rack)
    info = [s for s in samples if s.metric is c.GPU_FABRIC_INFO]
    assert len(info) == TRAYS * GPUS_PER_TRAY == 72
    assert {(s.labels["cluster_uuid"], s.labels["clique_id"]) for s in info} == {
        (rack.cluster_uuid, str(rack.clique_id))
    }
    assert {s.labels["state"] for s in info} == {"completed"}
    up = [s for s in samples if s.metric is c.FABRIC_SERVICE_UP]
    assert {s.labels["service"] for s in up} == {"imex"}  # no Fabric Manager on GB200 trays


def test_two_racks_are_two_domains() -> None:
    a, b = Nvl72Rack.build(0), Nvl72Rack.build(1)
    assert a.domain != b.domain and a.trays[0].node != b.trays[0].node


def _series(samples: list[Sample]) -> list[dict[str, str]]:
    keep = (c.GPU_FABRIC_INFO, c.GPU_FABRIC_HEALTH, c.FABRIC_SERVICE_UP)
    out = []
    for s in samples:
        if s.metric in keep:
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels.items() if v != "")
            out.append({"series": f"{s.metric.name}{{{labels}}}", "values": f"{s.value:g}x20"})
    return out


def _alerts(tmp_path: Path, rack: Nvl72Rack, alert: str, expected: list[dict]) -> str:
    """promtool's report on the fabric rules over one scrape of the rack held 20 minutes; with
    ``expected`` empty, a firing alert fails the case and the report lists what fired."""
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": _series(scrape(rack)),
            "alert_rule_test": [{"eval_time": "10m", "alertname": alert, "exp_alerts": expected}],
        }],
    }  # fmt: skip
    path = tmp_path / "t.yml"
    path.write_text(yaml.safe_dump(test))
    r = promtool("test", "rules", str(path))
    return (r.stdout + r.stderr).decode()


def test_a_switch_tray_down_is_one_domain_alert_and_no_gpu_alert(tmp_path: Path) -> None:
    rack = Nvl72Rack.build(0)
    rack.switch_tray_down()
    out = _alerts(tmp_path, rack, "GpuFabricDegraded", [])
    assert "SUCCESS" in out, out
    out = _alerts(tmp_path, rack, "NvlinkDomainFabricDegraded", [])
    assert "FAILED" in out and out.count(f'nvlink_domain="{rack.domain}"') == 1, out


def test_one_gpu_s_route_unhealthy_is_that_gpu_s_alert_only(tmp_path: Path) -> None:
    rack = Nvl72Rack.build(0)
    rack.route_unhealthy(tray=5, gpu=2)
    assert "SUCCESS" in _alerts(tmp_path, rack, "NvlinkDomainFabricDegraded", [])
    out = _alerts(tmp_path, rack, "GpuFabricDegraded", [])
    assert out.count('alertname="GpuFabricDegraded"') == 1 and rack.trays[5].node in out, out


def test_imex_down_on_most_trays_is_one_domain_alert(tmp_path: Path) -> None:
    rack = Nvl72Rack.build(0)
    rack.imex_unhealthy(range(12))
    assert "SUCCESS" in _alerts(tmp_path, rack, "ImexDown", [])
    out = _alerts(tmp_path, rack, "ImexDomainDown", [])
    assert out.count('alertname="ImexDomainDown"') == 1, out


def test_a_rack_power_brake_sets_reasons_0x88_on_every_gpu_as_nvml_documents() -> None:
    rack = Nvl72Rack.build(0)
    rack.power_brake()
    samples = scrape(rack)
    for reason in ("hw_power_brake_slowdown", "hw_slowdown"):  # 0x80, and 0x08 set with it
        on = [s for s in samples if s.metric is c.GPU_THROTTLE
              and s.labels["reason"] == reason]  # fmt: skip
        assert len(on) == 72 and all(s.value == 1 for s in on), reason
