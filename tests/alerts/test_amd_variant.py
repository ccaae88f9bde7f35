"""The AMD (DME) variant of the rule files (alerts/amd/) is generated from the native rules and
the AFID catalogue, never drifts, passes promtool, and its unit tests run on DME-shaped series."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from analyzer.afidcat import load_catalog
from analyzer.findings import FAULT_CLASS
from dashboards.amd_translate import translate
from dashboards.translate import Untranslatable
from exporter import catalog as c
from exporter import catalog_amd as dme
from tests.alerts.ruleset import ALERTS
from tests.realcomp import promtool


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ALERTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _load("generate_amd_rules")
VARIANT = sorted((ALERTS / "amd").glob("*.rules.yml"))
TESTS = sorted((ALERTS / "tests" / "amd").glob("*_test.yml"))


def _rules(path: Path) -> list[dict]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def _alerts() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in VARIANT:
        for r in _rules(p):
            if "alert" in r:
                out.setdefault(r["alert"], []).append(r)
    return out


def test_regenerating_the_variant_gives_the_committed_bytes() -> None:
    files = GEN.render_all()
    assert sorted(files) == [p.name for p in VARIANT]
    for p in VARIANT:
        assert p.read_text() == files[p.name], (
            f"{p} is stale: run python alerts/generate_amd_rules.py"
        )
    assert GEN.main(["--check"]) == 0


def test_a_translated_alert_keeps_its_native_name_and_routing_labels_and_every_alert_names_node_and_gpu() -> (
    None
):
    native: dict[str, list[dict]] = {}
    for p in GEN.GEN.SOURCES:
        for r in _rules(p):
            if "alert" in r:
                native.setdefault(r["alert"], []).append(r["labels"])
    alerts = _alerts()
    for name in ("GpuEccUncorrectable", "GpuThrottlingSustained", "GpuCountBelowInventory",
                 "InfinibandPortDown"):  # fmt: skip
        assert name in alerts
        assert all(r["labels"] in native[name] for r in alerts[name]), name
    for name, rules in alerts.items():
        for r in rules:
            expr = r["expr"].replace("gpuwarden_amd:", "")
            assert "gpuwarden_" not in expr and "DCGM_" not in expr, name
            routing = {"severity", "action", "fault_class"}
            assert set(r["labels"]) - {"afid_class"} == routing, name
            if not name.startswith("Infiniband"):  # node_exporter's: node from instance
                assert '"node", "$1", "hostname"' in r["expr"], name
                assert '"gpu", "$1", "gpu_id"' in r["expr"], name


def test_each_native_rule_left_out_is_listed_with_its_reason() -> None:
    kept = {r.get("alert") or r.get("record") for p in VARIANT for r in _rules(p)}
    for src in GEN.GEN.SOURCES:
        if src.name == "xid.rules.yml":
            assert (
                "alerts/xid.rules.yml (all): NVIDIA XIDs"
                in (ALERTS / "amd" / "afid.rules.yml").read_text()
            )
            continue
        head = (ALERTS / "amd" / src.name).read_text().split("\ngroups:")[0]
        for r in _rules(src):
            name = r.get("alert") or r["record"]
            renamed = name.replace("gpuwarden:", "gpuwarden_amd:")
            assert renamed in kept or f"#   {name}: " in head, f"{src.name}: {name}"


def test_the_alerts_read_only_dme_fields_the_catalogue_maps() -> None:
    known = {*dme.read_fields(), *(dme.ras_field(b, "correctable") for b in c.RAS_BLOCKS)}
    text = "\n".join(r["expr"] for p in VARIANT for r in _rules(p) if "infiniband" not in p.name)
    used = set(re.findall(r"\bgpu_[a-z0-9_]+(?=[{\[ )]|$)", text)) - {dme.GPU_ID, dme.GPU_UUID}
    assert used, "no DME field read"
    assert used <= known, sorted(used - known)


def test_every_afid_the_catalogue_pages_on_has_an_alert_with_its_severity_and_action() -> None:
    cat = load_catalog()
    alerts = _alerts()
    for e in cat.entries.values():
        if e.severity == "info":
            continue  # corrected: counted, not paged (as the analyzer's afid detector)
        kind = "afid_fatal" if e.fatal else "afid_event"
        hits = [r for rules in alerts.values() for r in rules
                if r["alert"].startswith("GpuAfid") and re.search(rf"== {e.afid}(?!\d)", r["expr"])]  # fmt: skip
        want = {"severity": e.severity, "action": e.action, "fault_class": FAULT_CLASS[kind]}
        if e.cls == "unknown":
            hits = alerts["GpuAfidUnclassified"]
        assert any(r["labels"] == {**want, "afid_class": e.cls} for r in hits), (e.afid, want)


def test_the_power_cap_residency_is_told_apart_from_thermal_throttling() -> None:
    record = next(r for r in _rules(ALERTS / "amd" / "gpu.rules.yml")
                  if r.get("record") == "gpuwarden_amd:gpu_clock_throttle_active:ratio")  # fmt: skip
    assert '"reason", "sw_power_cap"' in record["expr"].split("gpu_violation_ppt")[1].split("\n")[0]
    alert = _alerts()["GpuThrottlingSustained"][0]["expr"]
    assert "sw_power_cap" not in alert


@pytest.mark.real
@pytest.mark.usefixtures("prom_generation")  # on both Prometheus generations
def test_promtool_checks_the_variant_and_its_dme_shaped_unit_tests_pass() -> None:
    r = promtool("check", "rules", *map(str, VARIANT))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert TESTS
    r = promtool("test", "rules", *map(str, TESTS))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and out.count("SUCCESS") == len(TESTS), out


def test_dme_units_are_divided_back_into_the_catalogues() -> None:
    assert translate(f"{c.GPU_UTILIZATION.name} > 0.5") == "(gpu_gfx_activity / 100) > 0.5"
    clock = translate(f'{c.GPU_SM_CLOCK.name}{{node="a"}}')
    assert clock == '(gpu_clock{clock_type=~"system|GPU_CLOCK_TYPE_SYSTEM",hostname="a"} / 1e-06)'
    xgmi = translate(f'rate({c.GPU_XGMI_TRANSMIT.name}{{link="3"}}[5m])')
    assert xgmi == '(rate(gpu_xgmi_link_tx{link_index="3"}[5m]) / 0.0009765625)'


def test_a_ras_block_and_error_type_become_dmes_field_with_the_labels_restored() -> None:
    expr = translate(f'{c.GPU_RAS_ERRORS.name}{{block="umc",error_type="deferred",gpu="1"}}')
    assert expr == ('label_replace(label_replace(gpu_ecc_deferred_umc{gpu_id="1"}, "block", "umc",'
                    ' "", ""), "error_type", "deferred", "", "")')  # fmt: skip


@pytest.mark.parametrize(
    "expr",
    [f"rate({c.NVLINK_TRANSMIT.name}[5m])",  # NVIDIA's
     f'{c.GPU_ECC_ERRORS.name}{{counter_type="aggregate"}}',  # DME counts since driver load
     f"{c.GPU_ROW_REMAP_PENDING.name} == 1",
     "gpuwarden:gpu_count:by_node > 0"],  # a record the variant does not have
)  # fmt: skip
def test_what_dme_cannot_say_is_refused_not_guessed(expr: str) -> None:
    with pytest.raises(Untranslatable):
        translate(expr, produced=set())


def test_every_amd_alert_links_a_runbook_section_that_exists() -> None:
    headings = set(re.findall(r"^## (\w+)$", (ALERTS / "runbooks.md").read_text(), re.M))
    for name, rules in _alerts().items():
        for r in rules:
            anchor = r["annotations"]["runbook_url"].rsplit("#", 1)[1]
            assert anchor == name.lower() and name in headings, name
