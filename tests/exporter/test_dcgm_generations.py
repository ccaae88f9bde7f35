"""``--compat dcgm:<version>`` renders each dcgm-exporter naming generation: 3.x-4.8's names
(plain ``--compat dcgm``) and 4.9/4.10's DCGM canonical names, checked against DCGM 4.6.1's
field header (fixtures/dcgm/dcgm-4.6.1-field-names.tsv); every enabled field of the vendored
field lists (fixtures/dcgm-exporter/) is served with its type."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter import catalog_dcgm as gens
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.settings import ExporterSettings
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.sysfs import DictSysfs
from simulator.nvml_fake import FakeNvml
from tests.exporter.test_dcgm_compat import _node
from tests.realcomp import promtool

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm-exporter"
HEADER_TSV = FIXTURES.parent / "dcgm" / "dcgm-4.6.1-field-names.tsv"
LATER = ("4.9", "4.10")
# legacy unit (the catalogue's 4.8 help, "(in X)") -> DCGM's base unit -> factor
CONVERSIONS = {("MHz", "hertz"): 1e6, ("mJ", "joules"): 1e-3}
ROW = re.compile(r"^(DCGM_\w+)\s*,\s*(\w+)\s*,")
TAGS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
LISTS = [(t, f) for t in TAGS for f in ("default-counters.csv", "dcp-metrics-included.csv")]
# a release's list that types a field unlike the generation we render, and why
KNOWN = {  # 3.x's default list typed the PCIe rates "counter"; its own dcp list and 4.x: gauge
    ("3.3.9-3.6.1", "default-counters.csv", m.dcgm[0].name): "gauge"
    for m in (c.GPU_PCIE_TRANSMIT_RATE, c.GPU_PCIE_RECEIVE_RATE)
}


def _enabled(tag: str, name: str) -> dict[str, str]:
    rows = {}
    for line in (FIXTURES / tag / name).read_text().splitlines():
        if m := ROW.match(line):
            rows[m[1]] = m[2]
    return rows


def _scrape(nvml: FakeNvml, generation: str) -> str:
    cols = collectors_for("n1", nvml, DictSysfs(), ListKernelLog([]))
    loop = CollectionLoop(cols, "n1", source="test", interval=5, dcgm=True,
                          dcgm_generation=generation)  # fmt: skip
    loop.run_once()  # profiling (GPM) needs a pair of samples
    return loop.run_once().body.decode()


def _value(body: str, name: str) -> float:
    line = next(ln for ln in body.splitlines() if ln.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def bodies() -> dict[str, str]:
    return {g: _scrape(_node(), g) for g in gens.GENERATIONS}


def test_every_release_folder_is_recorded_in_the_readme_with_its_commit():
    readme = (FIXTURES / "README.md").read_text()
    assert len(TAGS) >= 2
    for tag in TAGS:
        assert re.search(rf"`{re.escape(tag)}` \| [0-9a-f]{{40}}", readme), tag


@pytest.mark.parametrize("listing", LISTS, ids=lambda x: f"{x[0]}/{x[1]}")
def test_each_vendored_field_list_is_served_by_its_generation_with_its_type(listing, bodies):
    tag, name = listing
    gen = gens.generation(tag)
    body = bodies[gen]
    for field, type_ in _enabled(tag, name).items():
        if type_ == "label":
            assert f'{gens.DRIVER_LABEL[gen]}="550.54.15"' in body, field
            continue
        served = gens.name_in(gen, field)
        assert served is not None, f"{tag}: {field} not served"
        want = KNOWN.get((tag, name, field), type_)
        assert f"# TYPE {served} {want}\n" in body, f"{tag}/{name}: {field} as {served} {want}"


@pytest.mark.parametrize("gen", ["4.9", "4.10"])
def test_the_later_generations_keep_every_4_8_default_field_renamed_or_say_why_not(gen, bodies):
    body = bodies[gen]
    for field, type_ in _enabled("4.5.3-4.8.2", "dcp-metrics-included.csv").items():
        if type_ == "label":
            continue
        served = gens.name_in(gen, field)
        if served is None:
            assert gens.OMITTED[gen][field], field
            assert field + "{" not in body
            continue
        assert f"# TYPE {served} {type_}\n" in body, field
        if served != field:
            assert f"\n{field}{{" not in body, f"{field} still served under its 4.8 name"
    assert f"{gens.DRIVER_LABEL[gen]}=" in body and f"{c.DCGM_DRIVER_LABEL}=" not in body


def _n(metric: c.MetricDef, gen: str) -> str:
    """The dcgm name of a catalogue metric's (first) field in generation ``gen``."""
    name = gens.name_in(gen, metric.dcgm[0].name if metric.dcgm else metric.name)
    assert name is not None
    return name


def _header() -> dict[str, dict[str, str]]:
    lines = HEADER_TSV.read_text().splitlines()
    cols = lines[0].split("\t")
    return {r[0]: dict(zip(cols, r, strict=True)) for r in (ln.split("\t") for ln in lines[1:])}


def _legacy_unit(field: str) -> str:
    f = c.dcgm_fields()[field]
    return f.help.split("(in ")[1].split(")")[0] if "(in " in f.help else ""


def test_the_vendored_header_table_covers_every_catalogue_dcgm_field_and_names_its_source():
    rows = _header()
    missing = [f for f in [*c.dcgm_fields(), c.DCGM_LAST_XID.name, c.DCGM_DRIVER_LABEL]
               if f not in rows]  # fmt: skip
    assert not missing, f"regenerate with fixtures/dcgm/extract_field_names.py: {missing}"
    readme = (HEADER_TSV.parent / "README.md").read_text()
    assert "b7fa31542404a9090ad0d1aabbbe592afbe234cb" in readme and "dcgm_fields.h" in readme
    assert rows[c.GPU_SM_CLOCK.dcgm[0].name]["field_id"] == "1603"  # a base-unit id, not 100


@pytest.mark.parametrize("gen", LATER)
def test_each_later_generation_names_every_field_as_dcgms_header_does(gen):
    rows = _header()
    wrong = {
        old: (gens.name_in(gen, old), row["canonical_name"])
        for old, row in rows.items()
        if old in c.dcgm_fields() or old == c.DCGM_LAST_XID.name
        if gens.name_in(gen, old) != row["canonical_name"]
    }
    assert not wrong, f"{gen}: (table, DCGM 4.6.1) {wrong}"
    assert gens.DRIVER_LABEL[gen] == rows[c.DCGM_DRIVER_LABEL]["canonical_name"]
    canonical = {r["canonical_name"] for r in rows.values()}
    assert all(r.name in canonical for r in gens.RENAMES[gen].values())
    assert all(n in canonical for n in gens.OMITTED[gen].values())


@pytest.mark.parametrize("gen", LATER)
def test_each_later_generation_scales_a_field_only_where_dcgm_gave_it_a_new_unit_id(gen):
    rows = _header()
    for old, r in gens.RENAMES[gen].items():
        row = rows[old]
        if row["field_id"] == row["legacy_field_id"]:  # an alias: the same field, same value
            assert r.factor == 1.0 and r.unit in ("", row["unit"]), old
        else:  # a base-unit field: the header's unit, converted from 4.8's
            assert r.unit == row["unit"], (old, r.unit, row["unit"])
            assert r.factor == CONVERSIONS[(_legacy_unit(old), row["unit"])], old


def test_4_10_has_no_rename_of_its_own_and_keeps_dcgms_pcie_byte_names():
    assert gens.RENAMES["4.10"] == gens.RENAMES["4.9"]
    assert gens.DRIVER_LABEL["4.10"] == gens.DRIVER_LABEL["4.9"] != c.DCGM_DRIVER_LABEL
    for m in (c.GPU_PCIE_TRANSMIT_RATE, c.GPU_PCIE_RECEIVE_RATE):
        assert _n(m, "4.10") == m.dcgm[0].name == _header()[m.dcgm[0].name]["canonical_name"]
    assert not any(r.name.endswith("_PER_SECOND") for r in gens.RENAMES["4.10"].values())


def test_units_convert_only_for_dcgms_base_unit_fields_mhz_to_hz_mj_to_j(bodies):
    old, new = bodies["4.8"], bodies["4.10"]

    def both(m: c.MetricDef) -> tuple[float, float]:
        return _value(old, _n(m, "4.8")), _value(new, _n(m, "4.10"))

    assert both(c.GPU_SM_CLOCK) == (1755, 1_755_000_000) and _n(c.GPU_SM_CLOCK, "4.10").endswith(
        "_HERTZ"
    )
    energy = both(c.GPU_ENERGY)
    assert energy[1] == pytest.approx(energy[0] / 1000, abs=1)
    assert both(c.GPU_UTILIZATION) == (97, 97)  # GPU_UTIL_RATIO is field 203: still percent
    assert _n(c.GPU_UTILIZATION, "4.10").endswith("_GPU_UTIL_RATIO")
    used = both(c.GPU_MEMORY_USED)  # the framebuffer fields keep their names and MiB
    assert used[0] == used[1] and _n(c.GPU_MEMORY_USED, "4.10") == c.GPU_MEMORY_USED.dcgm[0].name
    rate = both(c.GPU_PCIE_TRANSMIT_RATE)
    assert rate[0] == rate[1] == _value(bodies["4.9"], _n(c.GPU_PCIE_TRANSMIT_RATE, "4.9"))
    assert f"# HELP {_n(c.GPU_SM_CLOCK, '4.10')} SM clock frequency (in hertz).\n" in new
    assert f"# HELP {_n(c.GPU_UTILIZATION, '4.10')} GPU utilization (in %).\n" in new


def test_to_native_turns_each_generations_value_back_into_the_catalogues_unit(bodies):
    clock = _value(bodies["4.8"], c.GPU_SM_CLOCK.name)
    for gen in gens.GENERATIONS:
        table, name = gens.to_native(gen), _n(c.GPU_SM_CLOCK, gen)
        assert table[name][0] == c.GPU_SM_CLOCK.dcgm[0].name
        assert _value(bodies[gen], name) * table[name][1] == pytest.approx(clock)
    xid = _n(c.DCGM_LAST_XID, "4.9")
    assert xid != c.DCGM_LAST_XID.name and gens.to_native("4.9")[xid] == (c.DCGM_LAST_XID.name, 1.0)


@pytest.mark.parametrize(
    ("version", "gen"),
    [("", "4.8"), ("3", "4.8"), ("4.5.3-4.8.2", "4.8"), ("4.8", "4.8"), ("4.9", "4.9"),
     ("4.9.0", "4.9"), ("4.10", "4.10"), ("4.10.0", "4.10"), ("5.0", "4.10")],
)  # fmt: skip
def test_a_dcgm_exporter_version_names_its_generation(version, gen):
    assert gens.generation(version) == gen


def test_compat_settings_take_a_version_and_refuse_anything_else():
    assert ExporterSettings(compat="dcgm").dcgm_generation == "4.8"
    assert ExporterSettings(compat="dcgm:4.10").dcgm_generation == "4.10"
    assert ExporterSettings(compat="dcgm:4.9.0").dcgm
    for bad in ("dcgm:latest", "nvml:4.9", "dcgm4.9"):
        with pytest.raises(ValueError, match="--compat"):
            ExporterSettings(compat=bad)


@pytest.mark.parametrize("gen", ["4.9", "4.10"])
def test_promtool_parses_each_generations_exposition_its_only_complaints_are_dcgms_naming(
    gen, bodies
):
    r = promtool("check", "metrics", stdin=bodies[gen].encode())
    problems = set(r.stderr.decode().splitlines())
    assert r.returncode in (0, 3), problems  # 1 would be a format error
    naming = ("camelCase", '"_total" suffix', "should not include type 'counter'")
    assert all(p.startswith("DCGM_") and any(n in p for n in naming) for p in problems), problems
