"""Error counts in alerts and recordings are whole numbers on both Prometheus generations.

Prometheus 3.x reads range windows left-open, and increase() extrapolates over them: one
uncorrectable ECC error made the shipped GpuEccUncorrectable say "reported 1.111 uncorrectable
ECC error(s)" and InfinibandPortFatalErrors "rose by 1.111" (issue 32). Each case runs the
shipped rule files through the real promtool of each generation (``prom_generation``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter import catalog
from tests.realcomp import promtool

pytestmark = pytest.mark.usefixtures("prom_generation")

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
RUNBOOK = "https://github.com/gpuwarden/gpuwarden/blob/main/alerts/runbooks.md#"
ECC = (
    catalog.GPU_ECC_ERRORS.name
    + '{{node="n1",gpu="{gpu}",uuid="GPU-{gpu}",error_type="uncorrected",counter_type="volatile"}}'
)
IB = (
    catalog.IB_HW_COUNTER.name + '{{node="n1",device="{dev}",port="1",counter="rnr_nak_retry_err"}}'
)


def _run(tmp_path: Path, test: dict[str, object]) -> str:
    doc = {
        "rule_files": [str(ALERTS / "memory.rules.yml"), str(ALERTS / "infiniband.rules.yml")],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **test}],
    }
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    r = promtool("test", "rules", str(tmp_path / "t.yml"))
    return (r.stdout + r.stderr).decode()


def _ecc_alert(gpu: str, count: int) -> dict[str, object]:
    return {
        "exp_labels": {
            "node": "n1",
            "gpu": gpu,
            "uuid": f"GPU-{gpu}",
            "error_type": "uncorrected",
            "severity": "critical",
            "action": "drain",
            "fault_class": "memory",
        },
        "exp_annotations": {
            "summary": f"Uncorrectable ECC errors on n1 GPU {gpu}",
            "description": f"GPU {gpu} (GPU-{gpu}) on n1 reported {count} uncorrectable ECC "
            "error(s) in the last 10 minutes.",
            "runbook_url": RUNBOOK + "gpueccuncorrectable",
        },
    }


def test_one_and_three_uncorrectable_ecc_errors_are_reported_as_1_and_3(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        {
            "input_series": [
                {"series": ECC.format(gpu="0"), "values": "0x10 1x30"},
                {"series": ECC.format(gpu="1"), "values": "0x10 3x30"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "15m",
                    "alertname": "GpuEccUncorrectable",
                    "exp_alerts": [_ecc_alert("0", 1), _ecc_alert("1", 3)],
                }
            ],
        },
    )
    assert "SUCCESS" in out, out


def test_the_ecc_rise_recording_is_exact_for_born_reset_and_steady_series(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        {
            "input_series": [
                {"series": ECC.format(gpu="0"), "values": "0x10 2x30"},  # rose by 2
                {"series": ECC.format(gpu="1"), "values": "_x9 0 1 4x30"},  # born in the window
                {"series": ECC.format(gpu="2"), "values": "5x10 0 1x30"},  # exporter restart
                {"series": ECC.format(gpu="3"), "values": "7x40"},  # steady
            ],
            "promql_expr_test": [
                {
                    "expr": 'gpuwarden:gpu_ecc_errors:increase10m{node="n1"}',
                    "eval_time": "15m",
                    "exp_samples": [
                        {
                            "labels": ECC.format(gpu=g).replace(
                                catalog.GPU_ECC_ERRORS.name,
                                "gpuwarden:gpu_ecc_errors:increase10m",
                            ),
                            "value": v,
                        }
                        for g, v in (("0", 2), ("1", 4), ("2", 1), ("3", 0))
                    ],
                }
            ],
        },
    )
    assert "SUCCESS" in out, out


def test_one_infiniband_fatal_error_reads_rose_by_1(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        {
            "input_series": [{"series": IB.format(dev="mlx5_1"), "values": "2x10 3x20"}],
            "alert_rule_test": [
                {
                    "eval_time": "15m",
                    "alertname": "InfinibandPortFatalErrors",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "node": "n1",
                                "device": "mlx5_1",
                                "port": "1",
                                "counter": "rnr_nak_retry_err",
                                "severity": "warning",
                                "action": "notify",
                                "fault_class": "infiniband",
                            },
                            "exp_annotations": {
                                "summary": "InfiniBand mlx5_1 port 1 on n1 logged rnr_nak_retry_err",
                                "description": "rnr_nak_retry_err on n1 mlx5_1 port 1 rose by 1 in the last "
                                "10 minutes; jobs using this port have likely failed.",
                                "runbook_url": RUNBOOK + "infinibandportfatalerrors",
                            },
                        }
                    ],
                }
            ],
        },
    )
    assert "SUCCESS" in out, out
