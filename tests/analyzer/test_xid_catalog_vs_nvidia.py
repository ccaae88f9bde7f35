"""The XID catalogue against NVIDIA's, as vendored in fixtures/xid (origin in its README).

Fails on a code NVIDIA marks in use that the catalogue lacks, a resolution copied wrong, a
decode row of 144-150 missing or differing, ``reset_suffices`` out of step with RESET_GPU, or
an action that departs from what NVIDIA's resolution implies without a ``deviation`` that says
why and on what source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from analyzer import xidcat

ROOT = Path(__file__).resolve().parents[2]
NVIDIA = json.loads((ROOT / "fixtures/xid/nvidia_xid_catalog.json").read_text())
OURS: dict[int, dict[str, Any]] = {
    int(k): v for k, v in yaml.safe_load(xidcat.CATALOG_PATH.read_text())["xids"].items()
}
IN_USE = {c["code"]: c for c in NVIDIA["codes"] if c["description"] != "Unused"}
DECODE = NVIDIA["nvlink5_decode"]

# What each of NVIDIA's immediate resolutions implies for gpuwarden's action; None: any action
# (a workflow that reads more than the XID, or no published resolution).
IMPLIED: dict[str, set[str] | None] = {
    "IGNORE": {"notify"},
    "RESTART_APP": {"notify"},
    "UPDATE_SWFW": {"notify"},
    "CHECK_UVM": {"notify"},
    "XID_154_EVAL": {"notify"},
    # the only code in use with it as the immediate step is 142: the GPU goes to support first
    "CONTACT_SUPPORT": {"cordon", "drain"},
    "RESET_GPU": {"drain", "reboot"},
    "RESTART_BM": {"drain", "reboot"},
    "RESTART_VM": {"drain", "reboot"},
    "CHECK_MECHANICALS": {"drain"},
}


def _implied(immediate: str) -> set[str] | None:
    if immediate.startswith("WORKFLOW_") or immediate in ("XID_154", ""):
        return None
    return IMPLIED[immediate]


DETAIL_OF = re.compile(r"^Additional to Xid (\d+)\b")


def _implied_for(xid: int) -> set[str] | None:
    """What NVIDIA's resolution for ``xid`` implies; a code NVIDIA describes as additional to
    another XID (171, 172: detail lines of 48) shares that XID's resolution, so gpuwarden's
    action for it should be the one it takes for that XID."""
    detail = DETAIL_OF.match(IN_USE[xid]["description"])
    if detail and not IN_USE[xid]["immediate"]:
        return {OURS[int(detail.group(1))]["action"]}
    return _implied(IN_USE[xid]["immediate"])


def _row_index(row: dict[str, Any]) -> int:
    return int(row["intrinfo_v2"][6:12], 2)


def test_the_vendored_list_is_the_one_the_issue_counted() -> None:
    assert NVIDIA["generated"] == "2025-10-29T00:35:32Z"
    assert len(IN_USE) == 109 and len(DECODE) == 94


def test_every_xid_nvidia_marks_in_use_has_an_entry() -> None:
    assert sorted(set(IN_USE) - set(OURS)) == []


@pytest.mark.parametrize("xid", sorted(IN_USE))
def test_each_entry_copies_nvidia_s_resolutions_verbatim(xid: int) -> None:
    theirs = IN_USE[xid]
    assert OURS[xid]["nvidia"] == {
        "immediate": theirs["immediate"],
        "investigatory": theirs["investigatory"],
    }


def _all_rows_reset(xid: int) -> bool:
    rows = [r for r in DECODE if r["xid"] == xid]
    return bool(rows) and all(r["immediate"] == "RESET_GPU" for r in rows)


@pytest.mark.parametrize("xid", sorted(IN_USE))
def test_reset_suffices_exactly_where_nvidia_answers_reset_gpu(xid: int) -> None:
    resets = IN_USE[xid]["immediate"] == "RESET_GPU" or _all_rows_reset(xid)
    assert bool(OURS[xid].get("reset_suffices")) is resets


@pytest.mark.parametrize("xid", sorted(IN_USE))
def test_an_action_other_than_nvidia_s_says_why_and_where_from(xid: int) -> None:
    entry = OURS[xid]
    allowed = _implied_for(xid)
    departs = allowed is not None and entry["action"] not in allowed
    deviation = entry.get("deviation")
    if departs:
        assert deviation and deviation.get("reason") and deviation.get("source"), entry
    if deviation is not None:  # and one that is there must be about a real difference
        assert set(deviation) == {"reason", "source"}
        assert departs


def test_the_deviations_are_the_documented_few() -> None:
    assert sorted(x for x, e in OURS.items() if "deviation" in e) == [44, 142, 156, 171, 172]


@pytest.mark.parametrize("row", DECODE, ids=lambda r: f"{r['xid']}-{r['unit']}-{r['error_status']}")
def test_every_nvlink5_decode_row_is_in_the_catalogue_with_nvidia_s_answer(
    row: dict[str, Any],
) -> None:
    ours = [
        s
        for s in OURS[row["xid"]].get("subcodes", [])
        if s["unit"] == row["unit"]
        and s["error_status"] == row["error_status"]
        and s["index"] == _row_index(row)
    ]
    assert len(ours) == 1, row
    (sub,) = ours
    assert sub["nvidia"]["immediate"] == row["immediate"]
    assert sub["nvidia"]["investigatory"] == row["investigatory"]
    assert sub["nvidia"]["severity"] == row["severity"]
    assert sub["nvidia"].get("secondary", "") == row["secondary"]
    assert bool(sub.get("reset_suffices")) is (row["immediate"] == "RESET_GPU")
    implied = _implied(row["immediate"])
    assert implied is None or sub["action"] in implied or "deviation" in sub


def test_the_catalogue_has_no_decode_row_nvidia_does_not() -> None:
    ours = sum(len(e.get("subcodes", [])) for e in OURS.values())
    assert ours == len(DECODE)


def test_only_xid_163_of_the_power_smoothing_codes_asks_for_an_operator() -> None:
    cat = xidcat.load_catalog()
    warns = [x for x in (162, 163, 164, 165) if cat.get(x).severity != "info"]
    assert warns == [163]
    assert {cat.get(x).cls for x in (162, 163, 164, 165)} == {"power"}
    assert all(cat.get(x).action == "notify" for x in (162, 163, 164, 165))


def test_a_decoded_nvlink5_line_gets_its_row_s_action_not_the_xid_s() -> None:
    cat = xidcat.load_catalog()
    info = cat.get(145)
    fatal = info.subcode("RLW_REMAP", 0x40, 0)
    benign = info.subcode("RLW_REMAP", 0x100, 0)
    assert fatal is not None and (fatal.action, fatal.reset_suffices) == ("drain", True)
    assert benign is not None and (benign.severity, benign.action) == ("info", "notify")
    assert info.subcode("RLW_REMAP", 0x12345, 0) is None


def test_a_netir_link_down_is_told_apart_by_its_sub_code_and_either_unit_name() -> None:
    info = xidcat.load_catalog().get(149)
    host = info.subcode("NETIR_LINK_EVT", 0, 0b101000)
    peer = info.subcode("NETIR_LINK_DOWN", 0, 0b100000)
    whole = info.subcode("NETIR_LINK_EVT/NETIR_LINK_DOWN", 0, 0b100000)
    assert host is not None and host.nvidia.investigatory == "INVESTIGATE_HOST"
    assert host.reset_suffices is False
    assert (
        peer is not None
        and peer == whole
        and peer.nvidia.investigatory == ("INVESTIGATE_PEER_DEVICE")
    )


def test_the_module_api_answers_nvidia_s_resolution_and_reset_suffices() -> None:
    assert xidcat.resolution(79) == xidcat.Resolution("RESTART_BM", "CONTACT_SUPPORT")
    assert xidcat.reset_suffices(95) is True and xidcat.reset_suffices(79) is False
    assert xidcat.reset_suffices(150) is True
    assert xidcat.resolution(145, "RLW_REMAP", 0x40).immediate == "RESET_GPU"
    assert xidcat.reset_suffices(144, "SAW_MVB", 0x4) is False
    assert xidcat.resolution(9999) == xidcat.Resolution()


def test_every_recorded_nvlink5_line_decodes_to_a_catalogue_row() -> None:
    from exporter.sources.xid_lines import nvlink5_detail, parse_xid, strip_envelope

    cat = xidcat.load_catalog()
    for line in (ROOT / "fixtures/xid/nvlink5_xid.log").read_text().splitlines():
        event = parse_xid(strip_envelope(line))
        assert event is not None
        d = nvlink5_detail(event.xid, event.text)
        assert d is not None
        row = cat.get(event.xid).subcode(d.unit, d.error_status, d.subcode)
        assert row is not None, line
