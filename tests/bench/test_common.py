"""`bench.common.spread`: the median and range of each metric over repeated runs."""

from __future__ import annotations

import argparse
import statistics

import pytest

from bench.common import Result, Spread, add_repeat_option, print_runs, spread


def rows(rate: float, cpu: float) -> list[Result]:
    return [
        Result("deployment", "case", "upload to collected", rate, "reports/s"),
        Result("deployment", "case", "upload to collected", 20_000 / rate, "s"),
        Result("deployment", "case", "server CPU", cpu, "µs/report"),
    ]


def test_each_metric_is_summarised_over_the_runs() -> None:
    rates, cpus = [2_130.0, 3_702.0, 2_694.0, 2_747.0], [484.0, 368.0, 388.0, 377.0]
    summary = spread([rows(r, c) for r, c in zip(rates, cpus, strict=True)])
    # The same metric name in two units stays two metrics; the first run's order is kept.
    assert [(s.metric, s.unit) for s in summary] == [
        ("upload to collected", "reports/s"),
        ("upload to collected", "s"),
        ("server CPU", "µs/report"),
    ]
    rate, seconds, cpu = summary
    assert rate == Spread(
        "deployment",
        "case",
        "upload to collected",
        statistics.median(rates),
        2_130.0,
        3_702.0,
        "reports/s",
        4,
    )
    assert rate.median == (2_694.0 + 2_747.0) / 2
    assert (seconds.low, seconds.high) == (20_000 / 3_702.0, 20_000 / 2_130.0)
    assert (cpu.median, cpu.runs) == (382.5, 4)


def test_a_metric_missing_from_a_run_is_summarised_over_the_others() -> None:
    extra = Result("population", "8000 devices", "devices/s", 1_200.0, "devices/s")
    summary = spread([[*rows(2_000.0, 400.0), extra], rows(3_000.0, 300.0)])
    assert summary[-1] == Spread(
        "population", "8000 devices", "devices/s", 1_200.0, 1_200.0, 1_200.0, "devices/s", 1
    )


def test_one_run_prints_its_table_several_their_spread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_runs([rows(2_000.0, 400.0)], "one")
    one = capsys.readouterr().out
    assert "value" in one and "median" not in one and "2,000" in one
    print_runs([rows(2_000.0, 400.0), rows(3_000.0, 300.0), rows(2_500.0, 500.0)], "three")
    three = capsys.readouterr().out.splitlines()
    assert three[1] == "three, 3 runs"
    line = next(x for x in three if "reports/s" in x)
    assert line.split()[-5:] == ["2,500", "2,000", "3,000", "reports/s", "3"]


def test_repeat_takes_a_positive_count_and_refuses_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    add_repeat_option(parser, "the cases")
    assert parser.parse_args([]).repeat == 1
    assert parser.parse_args(["--repeat", "3"]).repeat == 3
    for bad in ("0", "-2", "three"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["--repeat", bad])
        assert exit_info.value.code == 2
        assert "--repeat" in capsys.readouterr().err
