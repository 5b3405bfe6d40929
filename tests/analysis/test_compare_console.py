"""What ``analysis compare`` prints: times in us, bus bandwidths in GB/s, ratios with intervals."""

from __future__ import annotations

import pandas as pd

from analysis.compare_console import console_summary


def _ratios(n: int = 2) -> pd.DataFrame:
    rows = [
        # 4 KiB: 223 us -> 250 us, x1.12 [1.05, 1.2], busbw 2.32 -> 2.07 GB/s: differs
        dict(
            V_bytes=4096,
            time_s_ref=223e-6,
            time_s=250e-6,
            time_ratio=250 / 223,
            time_ratio_ci_low=1.05,
            time_ratio_ci_high=1.2,
            differs=True,
            busbw_Bps_ref=2.32e9,
            busbw_Bps=2.07e9,
        ),
        # 1 MiB: 1.5 ms both, x1 [0.9, 1.1]: does not differ
        dict(
            V_bytes=1 << 20,
            time_s_ref=1.5e-3,
            time_s=1.5e-3,
            time_ratio=1.0,
            time_ratio_ci_low=0.9,
            time_ratio_ci_high=1.1,
            differs=False,
            busbw_Bps_ref=6e9,
            busbw_Bps=6e9,
        ),
    ][:n]
    return pd.DataFrame(rows).assign(sweep="bf16", reference="f32", op="all_gather")


def test_the_summary_is_in_the_reports_units():
    lines = console_summary(_ratios()).splitlines()
    assert lines == [
        "bf16 against f32: 2 shared points, 1 differ (95% interval excludes 1)",
        "  all_gather          4 KiB    223 us ->   250 us  x1.12 [1.05, 1.2]  busbw 2.32 GB/s -> 2.07 GB/s  differs",
        "  all_gather          1 MiB    1.5 ms ->   1.5 ms  x1 [0.9, 1.1]  busbw 6 GB/s -> 6 GB/s",
    ]
    assert "e-0" not in "\n".join(lines) and "B/s" not in "".join(lines).replace("GB/s", "")


def test_many_points_print_the_first_and_count_the_rest():
    lines = console_summary(_ratios(), max_lines=1).splitlines()
    assert len(lines) == 3 and lines[-1] == "  ... and 1 more (ratios.csv)"


def test_compare_prints_the_summary_then_the_reports_path(tiny_sweeps, tmp_path, capsys):
    from analysis.cli import main

    out = tmp_path / "cmp"
    assert main(["compare", str(tiny_sweeps["float32"]), str(tiny_sweeps["bfloat16"]), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ratios = pd.read_csv(out / "ratios.csv")
    assert lines[-1] == str(out / "index.html")
    assert lines[:-1] == console_summary(ratios).splitlines() and len(lines) == len(ratios) + 2  # heading, rows, path
    assert all(" us " in line or " ms " in line for line in lines[1:-1]) and all("GB/s" in line for line in lines[1:-1])
