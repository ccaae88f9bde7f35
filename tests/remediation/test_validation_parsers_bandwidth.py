"""nccl-tests, nvbandwidth and ib_write_bw output, row by row: which lines are result rows,
nccl-tests' two #wrong columns and its own "Out of bounds values : N FAILED", the size the
thresholds name (the largest, wherever its row is), maxBytes with a factor or a byte step,
nvbandwidth's diagonal, ib_write_bw's units. The layouts are those of
fixtures/validation/ (nccl-tests 2.13, nvbandwidth 0.4, perftest); the cases here are the
ones those runs do not show."""

from __future__ import annotations

import pytest

from remediation.validation.parsers import (
    Check,
    ParseError,
    parse_ib_write_bw,
    parse_nccl_tests,
    parse_nvbandwidth,
)

HEADER = "# nThread 1 nGpus 8 minBytes 8 maxBytes {max} step: {step} warmup iters: 5 iters: 20\n"


def line(
    size: int, busbw: float, wrong: int = 0, in_busbw: float | None = None, iw: int = 0
) -> str:
    ib = busbw if in_busbw is None else in_busbw
    return (
        f"{size:>12} {size // 4:>13} float sum -1 25.00 1.00 {busbw:.2f} {wrong}"
        f" 24.75 1.00 {ib:.2f} {iw}\n"
    )


def output(*rows: str, max_bytes: int = 1024, step: str = "2(factor)", tail: str = "") -> str:
    return (
        HEADER.format(max=max_bytes, step=step)
        + "#       size  count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
        + "".join(rows)
        + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 12.5 \n"
        + tail
    )


def test_the_largest_size_is_judged_wherever_its_row_is_and_in_place_counts_too() -> None:
    r = parse_nccl_tests(output(line(1024, 300.0, in_busbw=310.0), line(512, 400.0)))
    assert r.tool == "nccl-tests"
    assert r.measurements == {
        "max_busbw_gbps": 400.0,
        "busbw_at_max_size_gbps": 310.0,
        "avg_busbw_gbps": 12.5,
    }
    assert r.checks == (Check("data correctness", "pass", (), "#wrong=0"),)


def test_wrong_values_in_either_column_fail_data_correctness_and_are_counted() -> None:
    r = parse_nccl_tests(output(line(512, 1.0, wrong=2), line(1024, 1.0, iw=3)))
    assert r.checks == (Check("data correctness", "fail", (), "#wrong=5"),)
    r = parse_nccl_tests(output(line(512, 1.0, wrong=0), line(1024, 1.0, iw=1)))
    assert r.checks == (Check("data correctness", "fail", (), "#wrong=1"),)


def test_a_row_without_a_wrong_count_is_read_for_bandwidth_alone() -> None:
    # nccl-tests prints N/A in #wrong when validation is off (-c 0)
    text = output(line(1024, 8.0).replace(" 0 24.75", " N/A 24.75").replace(" 0\n", " N/A\n"))
    r = parse_nccl_tests(text)
    assert r.measurements["busbw_at_max_size_gbps"] == 8.0
    assert r.checks == (Check("data correctness", "pass", (), "#wrong=0"),)


def test_out_of_bounds_values_failed_fails_data_correctness_whatever_the_rows_say() -> None:
    text = output(line(1024, 8.0)).replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED"
    )
    assert parse_nccl_tests(text).checks == (
        Check("data correctness", "fail", (), "out of bounds values"),
    )
    warned = output(line(1024, 8.0), tail="NCCL WARN Call to ibv_reg_mr FAILED (retrying)\n")
    assert parse_nccl_tests(warned).checks[0].status == "pass"  # only nccl-tests' own verdict


def test_comment_lines_and_short_lines_are_not_rows() -> None:
    text = output(line(1024, 8.0)) + "  # 2048 512 float sum -1 1 1 99.0 0 1 1 99.0 0\n"
    text += "rank 2048 512 float sum -1 1 1 99.0 0 1 1 99.0 0\n"
    text += "4096 1024 float sum\n"
    r = parse_nccl_tests(text)
    assert r.measurements["max_busbw_gbps"] == 8.0


def test_a_row_with_a_number_nobody_can_read_is_a_parse_error() -> None:
    text = output(line(1024, 8.0).replace("8.00", "fast"))
    with pytest.raises(ParseError, match=r"^nccl-tests row not understood: could not convert"):
        parse_nccl_tests(text)


def test_output_with_neither_rows_nor_an_average_says_so() -> None:
    with pytest.raises(
        ParseError, match=r"^no nccl-tests result rows and no '# Avg bus bandwidth' line$"
    ):
        parse_nccl_tests("# nThread 1 nGpus 8\nNCCL WARN connect failed\n")


def test_an_average_alone_is_read() -> None:
    r = parse_nccl_tests("# Avg bus bandwidth    : 42.0\n")
    assert r.measurements == {"avg_busbw_gbps": 42.0}


@pytest.mark.parametrize(
    ("max_bytes", "step", "sizes", "complete"),
    [
        (1024, "2(factor)", (256, 512, 1024), True),
        (1024, "2(factor)", (256, 512), False),  # the next size, 1024, is still <= maxBytes
        (1000, "2(factor)", (250, 500, 1000), True),  # maxBytes reached exactly
        (1023, "2(factor)", (256, 512), True),  # 1024 > 1023: nothing left to run
        (1024, "1(factor)", (1000, 1023), False),  # a factor of 1 steps by one byte
        (1024, "0(factor)", (1023,), False),  # step 0 is read as 1
        (1024, "0(factor)", (1024,), True),
        (1024, "100(bytes)", (824, 924), False),  # 1024 is next
        (1024, "100(bytes)", (824, 924, 1024), True),
        (1024, "100(bytes)", (930,), True),  # 1030 > 1024
        (1024, "3(bytes)", (1021,), False),  # bytes: added, never multiplied
        (1024, "3(bytes)", (1022,), True),
    ],
)
def test_a_table_is_complete_only_when_the_next_size_would_pass_max_bytes(
    max_bytes: int, step: str, sizes: tuple[int, ...], complete: bool
) -> None:
    text = output(*(line(s, 1.0) for s in sizes), max_bytes=max_bytes, step=step)
    if complete:
        assert parse_nccl_tests(text).measurements["busbw_at_max_size_gbps"] == 1.0
    else:
        with pytest.raises(
            ParseError,
            match=rf"^nccl-tests table ends at size {max(sizes)}, before maxBytes {max_bytes}$",
        ):
            parse_nccl_tests(text)


def test_a_table_without_its_average_line_was_cut_off() -> None:
    text = HEADER.format(max=1024, step="2(factor)") + line(512, 1.0) + line(1024, 1.0)
    with pytest.raises(
        ParseError,
        match=r"^nccl-tests output cut off after size 1024 \(no '# Avg bus bandwidth' line\)$",
    ):
        parse_nccl_tests(text)


# -- nvbandwidth and ib_write_bw: the rows their fixtures do not show -------------------------


def nvb(*body: str) -> str:
    return "nvbandwidth Version: v0.4\n\n" + "\n".join(body) + "\n"


def test_nvbandwidth_reads_every_cell_but_the_diagonal_and_a_one_column_matrix_too() -> None:
    r = parse_nvbandwidth(nvb(
        "Running host_to_device_memcpy_ce.", "bandwidth (GB/s)", "           0", " 0     55.5",
        "", "SUM host_to_device_memcpy_ce 55.5",
        "Running device_to_device_memcpy_read_ce.", "           0         1         2",
        " 0       N/A    390.1    388.0", " 1     391.0      N/A     12.5",
        " 2     390.0    389.9       N/A", "SUM device_to_device_memcpy_read_ce 1961.5",
    ))  # fmt: skip
    assert r.tool == "nvbandwidth" and r.checks == ()
    assert r.measurements == {
        "host_to_device_memcpy_ce.sum_gbps": 55.5, "host_to_device_memcpy_ce.min_gbps": 55.5,
        "device_to_device_memcpy_read_ce.sum_gbps": 1961.5,
        "device_to_device_memcpy_read_ce.min_gbps": 12.5,
    }  # fmt: skip


def test_nvbandwidth_lines_outside_a_case_and_an_empty_matrix_give_only_the_sum() -> None:
    r = parse_nvbandwidth(nvb(" 0   1.0   2.0", "SUM lone 9.0", " 1   0.5   0.5"))
    assert r.measurements == {"lone.sum_gbps": 9.0}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            nvb("Running a.", " 0   N/A   fast", "SUM a 1.0"),
            r"^nvbandwidth matrix cell 'fast' in a$",
        ),
        (nvb("Running a.", " 0   N/A   1.0"), r"^nvbandwidth output cut off in a \(no SUM line\)$"),
        (nvb("nothing ran"), r"^no 'SUM <testcase> <GB/s>' line in nvbandwidth output$"),
    ],
)
def test_nvbandwidth_output_that_cannot_be_read_says_why(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_nvbandwidth(text)


IB_HEAD = " #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]"
RULE = "-" * 80


def ib(*rows: str, unit: str = "MB/sec", closed: bool = True) -> str:
    return "\n".join([RULE, IB_HEAD.format(u=unit), *rows, *([RULE] if closed else [])]) + "\n"


def test_ib_write_bw_is_read_at_the_largest_size_wherever_its_row_is_in_gb_per_s() -> None:
    r = parse_ib_write_bw(ib(" 65536  5000  48000.0  47000.0  0.7", " 2  5000  10.0  9.0  1.0",
                             " 1024  5000  20000.0  19000.0  1.0"))  # fmt: skip
    assert r.tool == "ib_write_bw" and r.checks == ()
    assert r.measurements == pytest.approx({"bw_peak_gbps": 48.0, "bw_average_gbps": 47.0})
    g = parse_ib_write_bw(ib(" 65536  5000  392.0  384.0  0.7", unit="Gb/sec"))
    assert g.measurements == pytest.approx({"bw_peak_gbps": 49.0, "bw_average_gbps": 48.0})


def test_ib_write_bw_skips_short_and_wordy_lines_between_the_header_and_its_rule() -> None:
    r = parse_ib_write_bw(ib(" 65536  5000  48000.0", "conn 65536 5000 1.0 1.0",
                             " 4096  5000  100.0  90.0  0.1"))  # fmt: skip
    assert r.measurements == pytest.approx({"bw_peak_gbps": 0.1, "bw_average_gbps": 0.09})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (ib(" 2  5000  10.0  9.0", " 65536  5000  1.0  1.0", closed=False),
         r"^ib_write_bw output cut off after size 65536 \(no closing rule\)$"),
        (ib(" 65536  5000  fast  1.0  0.7"), r"^ib_write_bw row not understood: 65536 5000 fast 1.0 0.7$"),
        (ib(), r"^no ib_write_bw result row \(#bytes #iterations BW peak \.\.\.\)$"),
        ("no header at all\n", r"^no ib_write_bw result row"),
    ],
)  # fmt: skip
def test_ib_write_bw_output_that_cannot_be_read_says_why(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_ib_write_bw(text)
