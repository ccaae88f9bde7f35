"""The component an incident is charged to: the fault class, refined by the XID's class in
the XID catalogue (analyzer/xid_catalog.yaml), not by a hand-kept list of XIDs."""

from pathlib import Path

import pytest

from accounting.components import component, xid_classes
from analyzer.xidcat import load_catalog


@pytest.mark.parametrize("xid", ["144", "145", "146", "147", "148", "149", "150", "74"])
def test_nvlink_xids_including_the_nvlink5_144_to_150_are_charged_to_nvlink(xid: str) -> None:
    assert component("xid_fatal", {"xid": xid}) == "nvlink"


@pytest.mark.parametrize("xid", ["48", "64", "95", "140"])
def test_memory_xids_are_charged_to_gpu_memory(xid: str) -> None:
    assert component("xid_fatal", {"xid": xid}) == "gpu_memory"


def test_a_hardware_xid_or_none_stays_with_the_gpu() -> None:
    assert component("xid_fatal", {"xid": "79"}) == "gpu"  # fallen off the bus: hardware
    assert component("xid_fatal", {"xid": "119"}) == "gpu"  # GSP: firmware on the board
    assert component("gpu_lost", {}) == "gpu"
    assert component("xid_fatal", {"xid": "99999"}) == "gpu"  # not in the catalogue


def test_the_alerts_xid_class_label_is_taken_before_the_catalogue() -> None:
    # alerts/generate_xid_rules.py labels every XID alert with its class (site overrides
    # included): that label wins over the shipped catalogue's class
    assert component("xid_fatal", {"xid": "79", "xid_class": "memory"}) == "gpu_memory"
    assert component("xid_fatal", {"xid": "48", "xid_class": "hardware"}) == "gpu"
    assert component("xid_fatal", {"xid": "13", "xid_class": "application"}) == "software"


def test_a_fault_class_that_is_not_the_gpus_is_not_refined_by_an_xid() -> None:
    assert component("infiniband", {"xid": "74"}) == "nic"
    assert component("memory", {"xid": "79"}) == "gpu_memory"
    assert component("no_such_class", {"xid": "74"}) == "unknown"


def test_every_xid_is_charged_by_its_catalogue_class() -> None:
    # the whole catalogue, as the analyzer loads it: a new link or memory XID needs no edit
    want = {"memory": "gpu_memory", "link": "nvlink", "application": "software",
            "driver": "software", "power": "host"}  # fmt: skip
    catalogue = load_catalog()
    assert len(catalogue.entries) > 100
    for xid, info in catalogue.entries.items():
        assert component("xid_fatal", {"xid": str(xid)}) == want.get(info.cls, "gpu"), xid


def test_without_the_catalogue_file_the_fault_class_alone_decides(tmp_path: Path) -> None:
    assert xid_classes(tmp_path / "missing.yaml") == {}
    broken = tmp_path / "broken.yaml"
    broken.write_text("xids: [not, a, mapping]\n")
    assert xid_classes(broken) == {}
    assert component("xid_fatal", {"xid": "74"}, classes={}) == "gpu"
