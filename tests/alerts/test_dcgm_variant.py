"""The dcgm-exporter variant of the rule files (alerts/dcgm/) is generated from the native
rules, never drifts, passes promtool, and its unit tests run on dcgm-shaped series."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dashboards.dcgm_translate import Untranslatable, translate
from exporter import catalog as c
from tests.alerts.ruleset import ALERTS, generator
from tests.realcomp import promtool

GEN = generator("generate_dcgm_rules")
VARIANT = sorted((ALERTS / "dcgm").glob("*.rules.yml"))
TESTS = sorted((ALERTS / "tests" / "dcgm").glob("*_test.yml"))


def _rules(path: Path) -> list[dict]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_regenerating_the_variant_gives_the_committed_bytes() -> None:
    files = GEN.render_all()
    assert sorted(files) == [p.name for p in VARIANT]
    for p in VARIANT:
        assert p.read_text() == files[p.name], (
            f"{p} is stale: run python alerts/generate_dcgm_rules.py"
        )
    assert GEN.main(["--check"]) == 0


def test_every_variant_alert_keeps_its_native_name_and_routing_labels_and_reads_no_gpuwarden_series():
    native: dict[str, list[dict]] = {}
    for p in GEN.SOURCES:
        for r in _rules(p):
            if "alert" in r:
                native.setdefault(r["alert"], []).append(r["labels"])
    alerts = [r for p in VARIANT for r in _rules(p) if "alert" in r]
    assert len(alerts) >= 30
    for r in alerts:
        assert r["labels"] in native[r["alert"]], r["alert"]
        assert "gpuwarden_" not in r["expr"].replace("gpuwarden_dcgm:", "")
        # remediation keys on node: from dcgm's Hostname, or node_exporter's instance (the
        # InfiniBand recordings take it there, for their joins)
        assert any(s in r["expr"] for s in ('"node", "$1", "Hostname"', '"node", "$1", "instance"',
                                            "gpuwarden_dcgm:infiniband_")), r["alert"]  # fmt: skip


def test_every_xid_class_that_alerts_natively_alerts_on_dcgm_with_the_same_labels() -> None:
    def label_sets(path: Path, prefix: str) -> set[str]:
        return {repr(sorted(r["labels"].items())) for r in _rules(path)
                if r.get("alert", "").startswith(prefix)}  # fmt: skip

    for prefix in ("GpuXidFatal", "GpuXidError"):
        native = label_sets(ALERTS / "xid.rules.yml", prefix)
        assert native and label_sets(ALERTS / "dcgm" / "xid.rules.yml", prefix) == native


def test_infiniband_port_state_and_error_counters_are_read_from_node_exporter() -> None:
    alerts = {r["alert"]: r["expr"] for r in _rules(ALERTS / "dcgm" / "infiniband.rules.yml")
              if "alert" in r}  # fmt: skip
    assert "node_infiniband_state_id" in alerts["InfinibandPortDown"]
    assert "node_infiniband_link_downed_total" in alerts["InfinibandLinkFlapping"]


def test_each_rule_left_out_is_listed_with_its_reason() -> None:
    for src in GEN.SOURCES:
        kept = {r.get("alert") or r.get("record") for r in _rules(ALERTS / "dcgm" / src.name)}
        head = (ALERTS / "dcgm" / src.name).read_text().split("\ngroups:")[0]
        for r in _rules(src):
            name = r.get("alert") or r["record"]
            renamed = name.replace("gpuwarden:", "gpuwarden_dcgm:")
            assert renamed in kept or f"#   {name}: " in head, f"{src.name}: {name}"


@pytest.mark.real
@pytest.mark.usefixtures("prom_generation")  # on both Prometheus generations
def test_promtool_checks_the_variant_and_its_dcgm_shaped_unit_tests_pass() -> None:
    r = promtool("check", "rules", *map(str, VARIANT))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert TESTS
    r = promtool("test", "rules", *map(str, TESTS))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and out.count("SUCCESS") == len(TESTS), out


def test_a_gauge_in_another_unit_is_divided_back_into_the_catalogues() -> None:
    expr = translate(f'{c.GPU_SM_CLOCK.name}{{node=~"$node"}} < 1e9')
    assert expr == f'({c.GPU_SM_CLOCK.dcgm[0].name}{{Hostname=~"$node"}} / 1e-06) < 1e9'


def test_a_counter_rate_is_taken_on_dcgms_series_then_scaled() -> None:
    expr = translate(f"sum by (node) (rate({c.GPU_ENERGY.name}[5m]))")
    assert expr == f"sum by (Hostname) (({'rate'}({c.GPU_ENERGY.dcgm[0].name}[5m]) / 1000))"


def test_a_metric_dcgm_splits_into_fields_becomes_their_union_with_the_labels_restored() -> None:
    expr = translate(f'{c.GPU_REMAPPED_ROWS.name}{{kind="uncorrectable", gpu="1"}}')
    assert (
        expr
        == f'label_replace({c.GPU_REMAPPED_ROWS.dcgm[1].name}{{gpu="1"}}, "kind", "uncorrectable", "", "")'
    )
    assert " or " in translate(c.GPU_REMAPPED_ROWS.name)


@pytest.mark.parametrize(
    "expr",
    [c.GPU_UP.name + " == 0",  # no dcgm field
     f'{c.GPU_ECC_ERRORS.name}{{error_type=~"unc.*"}}',  # a regex over a label dcgm splits
     f"rate({c.NVLINK_TRANSMIT.name}[5m])",  # dcgm adds TX and RX into one field
     "gpuwarden:gpu_count:by_node > 0"],  # a record the variant does not have
)  # fmt: skip
def test_what_dcgm_exporter_cannot_say_is_refused_not_guessed(expr: str) -> None:
    with pytest.raises(Untranslatable):
        translate(expr, produced=set())
