"""The shipped XID catalogue and the analyzer's settings file parse, and bad values stop the start."""

import pytest
import yaml

from analyzer.settings import AnalyzerSettings
from analyzer.xidcat import CATALOG_PATH, load_catalog
from common.settings import SettingsError, load


def test_every_shipped_xid_entry_has_class_severity_and_action_for_the_alert_generator():
    raw = yaml.safe_load(CATALOG_PATH.read_text())["xids"]
    cat = load_catalog()
    assert set(cat.entries) == {int(k) for k in raw}
    for k, v in raw.items():
        assert {"class", "severity", "action"} <= set(v), k
    assert cat.get(79).fatal and not cat.get(13).fatal and cat.get(13).repeat_count == 3
    assert cat.get(9999).action == "notify"


def test_a_bad_override_is_rejected():
    with pytest.raises(ValueError, match="unknown action"):
        load_catalog(overrides={63: {"action": "explode"}})


def test_config_file_carries_overrides_and_leaf_map(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text("prometheus: http://p:9090\nxid_overrides: {63: {action: drain}}\n"
                   "leaf_of: {gpu-node-001: leaf-01}\ninterval: 30\n")  # fmt: skip
    s = load(AnalyzerSettings, {"interval": "20"}, env={}, config_file=cfg)
    assert s.interval == 20 and s.leaf_of == {"gpu-node-001": "leaf-01"}
    assert s.detector_config()["xid_overrides"] == {63: {"action": "drain"}}


@pytest.mark.parametrize(
    "flags, why",
    [
        ({"targets": "t", "window": "10"}, "window"),
        ({"prometheus": "ftp://x"}, "http"),
        ({"targets": "t", "listen": "9836"}, "HOST:PORT"),
        ({}, "--prometheus"),
    ],
)
def test_bad_settings_stop_the_start_with_a_reason(flags, why):
    with pytest.raises(SettingsError, match=why):
        load(AnalyzerSettings, flags, env={})
