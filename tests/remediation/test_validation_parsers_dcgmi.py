"""dcgmi diag, row by row: every result word DCGM prints (Pass, Fail, Skip, Warn, Not Run),
per-GPU cells merged per test and status, warning rows attached to the check above them,
the version in the metadata, and each way a table or a ``-j`` document is unreadable (a
clear ParseError, never a pass). The tables follow fixtures/validation/dcgmi-diag-*.txt
(DCGM 3.3's box layout); the cases here are the rows those two runs do not show."""

from __future__ import annotations

import json

import pytest

from remediation.validation.parsers import (
    Check,
    ParseError,
    parse_dcgmi_diag,
    parse_dcgmi_diag_json,
    parse_dcgmi_diag_text,
)

HEAD = [
    "Successfully ran diagnostic for group.",
    "+---------------------------+------------------------------------------------+",
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
    "|-----  Metadata  ----------+------------------------------------------------|",
    "| DCGM Version              | 4.2.3                                          |",
]
BORDER = "+---------------------------+------------------------------------------------+"


def table(*rows: str, border: bool = True) -> str:
    return "\n".join([*HEAD, *rows, *([BORDER] if border else [])]) + "\n"


def row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<46} |"


def category(name: str) -> str:
    return f"+-----  {name}  {'-' * max(1, 18 - len(name))}+{'-' * 48}+"


def test_every_result_word_dcgm_prints_is_read_and_the_version_is_kept() -> None:
    r = parse_dcgmi_diag_text(
        table(
            category("Deployment"),
            row("Denylist", "Pass"),
            row("Graphics Processes", "Warn - GPU: 2"),
            row("Inforom", "Skip"),
            row("EUD", "Not Run"),
            row("Persistence Mode", "fail - All"),
        )
    )
    assert r.tool == "dcgmi-diag" and r.measurements == {"dcgm_version_major": 4.0}
    assert r.checks == (
        Check("Denylist", "pass"),
        Check("Graphics Processes", "warn", (2,)),
        Check("Inforom", "skip"),
        Check("EUD", "skip"),
        Check("Persistence Mode", "fail"),
    )


def test_a_version_without_a_major_number_reads_as_zero() -> None:
    text = table(category("Deployment"), row("Denylist", "Pass")).replace("4.2.3", ".9")
    assert parse_dcgmi_diag_text(text).measurements == {"dcgm_version_major": 0.0}


def test_a_result_word_nobody_knows_is_an_error_never_a_pass() -> None:
    with pytest.raises(ParseError, match=r"^unknown diagnostic status 'Exploded'$"):
        parse_dcgmi_diag_text(table(category("Hardware"), row("GPU Memory", "Exploded - GPU: 1")))


def test_per_gpu_cells_of_one_test_are_one_check_per_status_with_their_gpus_merged() -> None:
    r = parse_dcgmi_diag_text(
        table(
            category("Stress"),
            row("Memory Bandwidth", "Pass - GPUs: 4, 0"),
            row("", "Fail - GPU: 3"),
            row("", "Pass - GPU: 2"),
            row("", "Fail - GPUs: 1, 3"),
            row("Warning", "GPU 1 too slow"),
            row("", "and GPU 3 too"),
        )
    )
    assert r.checks == (
        Check("Memory Bandwidth", "pass", (0, 2, 4)),
        Check("Memory Bandwidth", "fail", (1, 3), "GPU 1 too slow and GPU 3 too"),
    )
    assert r.failed_gpus() == {1, 3}


def test_warnings_on_two_cells_of_one_test_and_status_are_joined() -> None:
    r = parse_dcgmi_diag_text(
        table(
            category("Stress"),
            row("Targeted Power", "Fail - GPU: 0"),
            row("Warning", "GPU 0 power low"),
            row("", "Fail - GPU: 5"),
            row("Warning", "GPU 5 power low"),
        )
    )
    # each warning stays with its own cell until the cells of one status are merged
    assert r.checks == (Check("Targeted Power", "fail", (0, 5), "GPU 0 power low GPU 5 power low"),)
    assert r.failed_gpus() == {0, 5}


def test_a_warning_row_belongs_to_the_check_above_and_a_new_category_ends_it() -> None:
    r = parse_dcgmi_diag_text(
        table(
            category("Integration"),
            row("PCIe", "Fail - GPU: 3"),
            row("Warning", "GPU 3 link width 8"),
            category("Hardware"),
            row("", "Pass - All"),  # no test named in this category yet: not a result
            row("GPU Memory", "Pass - all"),
        )
    )
    assert r.checks == (
        Check("PCIe", "fail", (3,), "GPU 3 link width 8"),
        Check("GPU Memory", "pass", ()),
    )


def test_rows_before_any_category_and_metadata_rows_are_not_results() -> None:
    text = "\n".join(
        [HEAD[0], HEAD[1], row("Diagnostic", "Result"), row("Stray", "Fail - GPU: 1"), *HEAD[4:],
         row("Driver Version Detected", "550.54"), category("Hardware"),
         row("GPU Memory", "Pass"), BORDER]
    )  # fmt: skip
    r = parse_dcgmi_diag_text(text)
    assert r.checks == (Check("GPU Memory", "pass"),)


def test_an_empty_result_cell_is_no_result_and_an_unreadable_one_is_an_error() -> None:
    r = parse_dcgmi_diag_text(
        table(category("Hardware"), row("GPU Memory", ""), row("Diag", "Pass"))
    )
    assert r.checks == (Check("Diag", "pass"),)
    with pytest.raises(ParseError, match="unknown diagnostic status 'Maybe'"):
        parse_dcgmi_diag_text(table(category("Hardware"), row("GPU Memory", "Maybe - later")))


def test_rows_with_trailing_spaces_are_still_rows() -> None:
    text = table(category("Hardware"), row("GPU Memory", "Fail - GPU: 7") + "   ")
    assert parse_dcgmi_diag_text(text).checks == (Check("GPU Memory", "fail", (7,)),)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("dcgmi: could not connect to the host engine\n", r"^not a dcgmi diag table \(no 'Diagnostic' header\)$"),
        ("| a | b |\n", r"^not a dcgmi diag table"),
        ("Diagnostic results follow\n", r"^not a dcgmi diag table"),
        (table(category("Deployment")), r"^dcgmi diag table has no test results$"),
        (table(category("Hardware"), row("GPU Memory", "Pass"), row("Diag", "Fail - GPU: 1"), border=False),
         r"^dcgmi diag table cut off after 'Diag' \(no closing border\)$"),
    ],
)  # fmt: skip
def test_an_unreadable_or_cut_table_says_why(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_dcgmi_diag_text(text)


def doc(*results: object, name: str = "Memory Bandwidth") -> str:
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Stress", "tests": [{"name": name, "results": list(results)}]}]}})  # fmt: skip


def test_json_results_name_their_gpus_by_any_of_dcgms_keys_and_keep_their_warnings() -> None:
    r = parse_dcgmi_diag_json(
        doc(
            {"status": "Pass", "gpu_id": "0"},
            {
                "status": "Fail",
                "gpu_ids": [1, 3],
                "warnings": [{"warning": "GPU 1 slow"}, "GPU 3 slow"],
            },
            {"status": "Fail", "entity_id": 5},
            {"status": "Warn", "gpu_id": None},
            {"status": "Skip", "gpu_id": ""},
        )
    )
    assert r.tool == "dcgmi-diag" and r.measurements == {}
    assert r.checks == (
        Check("Memory Bandwidth", "pass", (0,)),
        Check("Memory Bandwidth", "fail", (1, 3, 5), "GPU 1 slow GPU 3 slow"),
        Check("Memory Bandwidth", "warn"),
        Check("Memory Bandwidth", "skip"),
    )


def test_json_after_a_line_of_text_is_read_and_a_test_without_a_name_is_named_so() -> None:
    body = json.dumps({"DCGM GPU Diagnostic": {"test_categories": [
        {"tests": [{"results": [{"status": "Pass"}]}]}, "junk", {"tests": None}, {}]}})  # fmt: skip
    assert parse_dcgmi_diag_json("Successfully ran diagnostic.\n" + body).checks == (
        Check("?", "pass"),
    )
    assert parse_dcgmi_diag("  \n" + doc({"status": "Fail", "gpu_id": 2})).failed_gpus() == {2}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("no json here", r"^dcgmi diag -j output is not JSON: "),
        ("{broken", r"^dcgmi diag -j output is not JSON: "),
        ("[1, 2]", r"^dcgmi diag -j output has no 'DCGM GPU Diagnostic.test_categories'$"),
        ('{"DCGM GPU Diagnostic": {"test_categories": {}}}', r"has no 'DCGM GPU Diagnostic"),
        ('{"DCGM GPU Diagnostic": []}', r"has no 'DCGM GPU Diagnostic"),
        ('{"DCGM GPU Diagnostic": {"test_categories": []}}', r"^dcgmi diag -j output has no test results$"),
        (doc({"gpu_id": 1}), r"^dcgmi diag -j: result of 'Memory Bandwidth' has no status$"),
        (doc("Pass"), r"^dcgmi diag -j: result of 'Memory Bandwidth' has no status$"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [{"tests": ["x"]}]}}',
         r"^dcgmi diag -j: a test entry is not an object: 'x'$"),
        (doc({"status": "Smoking"}), r"^unknown diagnostic status 'Smoking'$"),
    ],
)  # fmt: skip
def test_an_unreadable_json_document_says_why(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_dcgmi_diag_json(text)
