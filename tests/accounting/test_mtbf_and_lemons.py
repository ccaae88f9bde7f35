"""MTBF cells, their exact chi-squared interval and lemons, worked out by hand.

Chi-squared quantiles from the NIST table (e-Handbook 1.3.6.7.4): chi2(0.95; 10) = 18.307,
chi2(0.05; 8) = 2.733, chi2(0.95; 2) = 5.991. Poisson(1.5): P(X<=4) = 0.9814,
P(X<=5) = 0.9955, so its 99th percentile is 5.
"""

import pytest

from tests.accounting.builders import at, exposure, gpus, incident
from tests.accounting.helpers import cell, report_of

TEN = gpus("n1", 8, at(0), at(1000)) + gpus("n2", 2, at(0), at(1000))  # 10,000 GPU-hours


def _gpu_failures(n: int) -> list[dict]:
    return [incident(f"i{k}", onset=at(k + 1), detected=at(k + 1)) for k in range(n)]


def test_mtbf_is_exposure_over_failures_with_the_exact_90_percent_interval() -> None:
    got = cell(report_of(_gpu_failures(4), TEN), "H100", "gpu")
    assert got["failures"] == 4
    assert got["exposure_hours"] == pytest.approx(10_000)
    assert got["mtbf_hours"] == pytest.approx(2500)
    assert got["lower90"] == pytest.approx(20_000 / 18.307, rel=1e-4)
    assert got["upper90"] == pytest.approx(20_000 / 2.733, rel=1e-3)


def test_a_cell_with_exposure_and_no_failures_has_no_mtbf_and_no_upper_bound() -> None:
    got = cell(report_of(_gpu_failures(4), TEN), "H100", "nvlink")
    assert got["failures"] == 0
    assert got["mtbf_hours"] is None and got["upper90"] is None
    assert got["lower90"] == pytest.approx(20_000 / 5.991, rel=1e-4)


def test_node_components_are_exposed_in_node_hours_and_a_node_without_rows_by_its_gpus() -> None:
    rows = [
        exposure("a", "n1", "0", at(0), at(1000)),
        exposure("b", "n1", "1", at(500), at(1500)),
        exposure("n2", "n2", None, at(0), at(300)),
        exposure("c", "n2", "0", at(0), at(1500)),
    ]
    inc = incident("x", component="host", gpu=None, node="n1")
    got = cell(report_of([inc], rows), "H100", "host")
    assert got["exposure_hours"] == pytest.approx(1500 + 300)
    assert got["mtbf_hours"] == pytest.approx(1800)
    assert cell(report_of([inc], rows), "H100", "gpu")["exposure_hours"] == pytest.approx(3500)


def test_software_and_unknown_cells_report_failures_without_exposure() -> None:
    incs = [
        incident("s", component="software"),
        incident("u", component="unknown", onset=at(11), detected=at(11)),
    ]
    doc = report_of(incs, TEN)
    for component in ("software", "unknown"):
        got = cell(doc, "H100", component)
        assert got["failures"] == 1
        assert got["exposure_hours"] is None and got["mtbf_hours"] is None


def test_cells_are_per_gpu_model_and_exposure_is_clipped_to_the_window() -> None:
    rows = gpus("n1", 4, at(0), at(1000), "A100") + gpus("n2", 4, at(0), None, "H100")
    incs = [incident("a", node="n1", gpu_model="A100", onset=at(100), detected=at(100))]
    doc = report_of(incs, rows, since=at(0), until=at(500))
    assert cell(doc, "A100", "gpu")["exposure_hours"] == pytest.approx(2000)
    assert cell(doc, "A100", "gpu")["mtbf_hours"] == pytest.approx(2000)
    assert cell(doc, "H100", "gpu")["exposure_hours"] == pytest.approx(2000)
    assert cell(doc, "H100", "gpu")["failures"] == 0


def test_a_unit_failing_beyond_the_poisson_99th_percentile_is_a_lemon() -> None:
    # 10 GPUs x 1000 h; n1/0 fails 6 times, the 9 others once: 15 failures, the model's rate
    # makes 1.5 expected per GPU, whose 99th percentile is 5: 6 > 5, 1 is not.
    incs = [incident(f"a{k}", onset=at(k + 1), detected=at(k + 1)) for k in range(6)]
    others = [("n1", str(g)) for g in range(1, 8)] + [("n2", "0"), ("n2", "1")]
    incs += [
        incident(f"b{k}", node=n, gpu=g, onset=at(50 + k), detected=at(50 + k))
        for k, (n, g) in enumerate(others)
    ]
    doc = report_of(incs, TEN)
    assert doc["lemons"] == [
        {
            "unit": "n1/0",
            "node": "n1",
            "gpu": "0",
            "gpu_model": "H100",
            "component": "gpu",
            "failures": 6,
            "exposure_hours": pytest.approx(1000),
        }
    ]


def test_five_failures_at_a_rate_expecting_one_and_a_half_is_no_lemon() -> None:
    incs = [incident(f"a{k}", onset=at(k + 1), detected=at(k + 1)) for k in range(5)]
    others = [("n1", str(g)) for g in range(1, 8)] + [("n2", "0"), ("n2", "1")]
    incs += [
        incident(f"b{k}", node=n, gpu=g, onset=at(50 + k), detected=at(50 + k))
        for k, (n, g) in enumerate(others)
    ]
    incs.append(incident("c", node="n2", gpu="1", onset=at(90), detected=at(90)))
    assert report_of(incs, TEN)["lemons"] == []


def test_a_failure_is_charged_to_the_serial_in_service_at_onset() -> None:
    rows = [exposure("old", "n1", "0", at(0), at(100)), exposure("new", "n1", "0", at(100), None)]
    rows += gpus("n2", 8, at(0), at(1000))
    incs = [incident(f"a{k}", onset=at(10 + k), detected=at(10 + k)) for k in range(5)]
    incs.append(incident("late", onset=at(500), detected=at(500)))
    (lemon,) = report_of(incs, rows, until=at(1000))["lemons"]
    assert lemon["unit"] == "old" and lemon["failures"] == 5


@pytest.mark.parametrize("mean", [0.0, 0.005, 0.0101, 0.05, 0.6, 1.5, 7.3, 42.0, 499.0, 800.0])
def test_the_poisson_99th_percentile_matches_scipy(mean: float) -> None:
    from scipy.stats import poisson

    from accounting.stats import poisson_upper

    assert poisson_upper(mean) == (0 if mean == 0 else int(poisson.ppf(0.99, mean)))
