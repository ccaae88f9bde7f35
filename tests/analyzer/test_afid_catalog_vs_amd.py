"""The AFID catalogue against AMD's facts, as vendored in fixtures/amd-afid (origins in its README).

Fails on an AFID amdsmi's decoder can emit that the catalogue lacks, a CPER severity that is not
the decoder's, an AMD resolution that differs from the Service Action Guide condition it names,
or an action that departs from what AMD's resolution implies without a ``deviation`` that says
why and on what source (as tests/analyzer/test_xid_catalog_vs_nvidia.py does for XIDs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analyzer import afidcat

ROOT = Path(__file__).resolve().parents[2]
DECODER = json.loads((ROOT / "fixtures/amd-afid/addc_mi300_afids.json").read_text())
SAG = json.loads((ROOT / "fixtures/amd-afid/gpu_operator_sag_conditions.json").read_text())
OURS: dict[int, dict[str, Any]] = {
    int(k): v for k, v in yaml.safe_load(afidcat.CATALOG_PATH.read_text())["afids"].items()
}
EMITTED = {a["afid"]: a for a in DECODER["afids"]}


def _implied(entry: dict[str, Any]) -> set[str]:
    """What AMD's resolution implies for gpuwarden's action: a SAG condition runs AMD's default
    workflow (taint, drain, reboot, validation), so drain or reboot; no condition (a corrected
    error AMD counts but does not remediate): notify."""
    return {"drain", "reboot"} if entry.get("amd", {}).get("condition") else {"notify"}


def test_the_vendored_facts_are_the_ones_the_catalogue_was_built_from() -> None:
    assert DECODER["commits"]["mi300_gpu_afid.hpp"].startswith("bfb078ee")
    assert SAG["commit"].startswith("7790ceb0")
    assert len(EMITTED) == 28 and len(SAG["conditions"]) == 24


def test_every_afid_amds_decoder_emits_has_an_entry() -> None:
    assert sorted(set(EMITTED) - set(OURS)) == []


def test_the_catalogue_has_no_afid_the_decoder_does_not_emit() -> None:
    assert sorted(set(OURS) - set(EMITTED)) == []


@pytest.mark.parametrize("afid", sorted(EMITTED))
def test_each_entry_carries_the_decoders_cper_severity(afid: int) -> None:
    theirs = EMITTED[afid]["severity"]
    assert OURS[afid]["cper_severity"] == theirs


@pytest.mark.parametrize("afid", sorted(EMITTED))
def test_each_amd_resolution_is_the_sag_conditions_verbatim(afid: int) -> None:
    amd = OURS[afid].get("amd")
    if amd is None:  # AMD remediates nothing for it: only corrected and unclassified events
        assert EMITTED[afid]["severity"] in ("non_fatal_corrected", "any")
        return
    cond = SAG["conditions"][amd["condition"]]
    assert amd == {
        "condition": amd["condition"],
        "physical_action": cond["physical_action_needed"],
        "remediation": cond["remediation"],
        "on_test_failure": cond["on_test_failure"],
    }
    assert {amd["remediation"], amd["on_test_failure"]} <= set(SAG["codes"])


@pytest.mark.parametrize("afid", sorted(EMITTED))
def test_an_action_other_than_amds_says_why_and_where_from(afid: int) -> None:
    entry = OURS[afid]
    departs = entry["action"] not in _implied(entry) and afid != 16999
    deviation = entry.get("deviation")
    if departs:
        assert deviation and deviation.get("reason") and deviation.get("source"), entry
    if deviation is not None:
        assert set(deviation) == {"reason", "source"}
        assert departs


def test_the_deviations_are_the_documented_few() -> None:
    assert sorted(x for x, e in OURS.items() if "deviation" in e) == [22, 23, 28]


def test_no_entry_claims_a_gpu_reset_suffices_where_amds_workflow_reboots() -> None:
    assert not any(e.get("reset_suffices") for e in OURS.values())
    assert "reboot" in SAG["workflow"]


def test_a_fatal_event_is_never_judged_below_critical_and_drain() -> None:
    cat = afidcat.load_catalog()
    for afid in (*OURS, 4242):
        info = cat.get(afid, "fatal")
        assert (info.severity, info.action) == ("critical", "drain") or info.action == "reboot"


def test_an_afid_the_catalogue_lacks_is_judged_by_its_cper_severity() -> None:
    cat = afidcat.load_catalog()
    assert (cat.get(4242, "non_fatal_corrected").severity, cat.get(4242).action) == (
        "warning",
        "notify",
    )
    assert cat.get(4242, "non_fatal_uncorrected").action == "notify"
    assert cat.get(4242, "fatal").action == "drain"


def test_a_site_override_changes_one_afid_and_keeps_amds_resolution() -> None:
    cat = afidcat.load_catalog(overrides={22: {"action": "drain", "severity": "critical"}})
    info = cat.get(22)
    assert (info.severity, info.action) == ("critical", "drain")
    assert info.amd.condition == "AMDGPUHBMError"


def test_the_module_api_answers_amds_resolution() -> None:
    assert afidcat.resolution(27).condition == "AMDGPUWatchdogTimeoutWdt"
    assert afidcat.resolution(18).remediation == "RESEAT_GPU_TRAY"
    assert afidcat.resolution(29) == afidcat.AmdResolution()


def test_a_bad_entry_stops_the_load_with_the_afid_named(tmp_path) -> None:
    bad = tmp_path / "afids.yaml"
    bad.write_text("afids:\n  20: {name: x, class: memory, cper_severity: fatal,"
                   " severity: critical, action: explode}\n")  # fmt: skip
    with pytest.raises(ValueError, match="afid 20"):
        afidcat.load_catalog(bad)
