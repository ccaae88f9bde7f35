"""outages.py's edges: what is out of service, exposure less it, and the charge order."""

from accounting import outages
from accounting.model import Exposure, Incident

T, H = 1_800_000_000.0, 3600.0


def _inc(id_: str, start_h: float, end_h: float | None, gpus_out: int = 8, gpu: str | None = None):  # type: ignore[no-untyped-def]
    return Incident(
        id_, "n1", gpu, "H100", "gpu", "xid_fatal", T + start_h * H, T + start_h * H,
        T + start_h * H, None if end_h is None else T + end_h * H, gpus_out,
    )  # fmt: skip


def _charged_h(charges: dict, id_: str) -> float:  # type: ignore[type-arg]
    return sum(g * (e - s) for s, e, g in charges[id_]) / H


def test_an_incident_mitigated_with_no_gpu_out_takes_nothing_out_of_service() -> None:
    # an imported incident whose mitigation took nothing out (gpus_out 0)
    nothing = _inc("a", 1.0, 2.0, gpus_out=0)
    rows = [Exposure("n1/0", "n1", "0", "H100", T, T + 10 * H)]
    assert outages.in_service(rows, [nothing]) == rows
    assert outages.out_of_service([nothing]) == {}
    assert outages.charges([nothing]) == {}


def test_two_outages_mitigated_at_once_charge_the_first_by_id_whatever_their_order() -> None:
    for order in (["b", "a"], ["a", "b"]):
        charges = outages.charges([_inc(i, 0.0, 10.0) for i in order])
        assert _charged_h(charges, "a") == 80.0 and _charged_h(charges, "b") == 0.0


def test_two_gpus_isolated_at_overlapping_times_are_each_charged_in_full() -> None:
    charges = outages.charges([_inc("a", 0.0, 10.0, 1, "1"), _inc("b", 5.0, 15.0, 1, "2")])
    assert _charged_h(charges, "a") == 10.0 and _charged_h(charges, "b") == 10.0
    again = outages.charges([_inc("a", 0.0, 10.0, 1, "1"), _inc("b", 5.0, 15.0, 1, "1")])
    assert _charged_h(again, "b") == 5.0  # the same GPU: only beyond the first


def test_known_nodes_exposure_names_each_gpu_and_stays_open_to_the_end() -> None:
    rows = outages.fleet_exposure(["n1"], [_inc("a", 1.0, 2.0)], T, T + 10 * H)
    assert sorted({r.unit for r in rows}) == [f"n1/{g}" for g in range(8)]  # 8 by default
    for g in range(8):
        pieces = sorted((r.start, r.end) for r in rows if r.gpu == str(g))
        assert pieces == [(T, T + H), (T + 2 * H, None)]  # still in service: open


def test_a_presence_row_that_ended_keeps_its_end_around_an_outage() -> None:
    rows = [Exposure("S0", "n1", "0", "H100", T, T + 5 * H)]
    got = outages.in_service(rows, [_inc("a", 1.0, 2.0)])
    assert [(r.start, r.end) for r in got] == [(T, T + H), (T + 2 * H, T + 5 * H)]
