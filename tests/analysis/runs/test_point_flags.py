"""Device time on CPU said for what it is (issue 24 item 5): no dispatch share from it (blank,
never negative), the profiler's slowdown measured per point and printed where a report
states it, and traces that ran far slower than the untraced step marked unrepresentative."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.runs.record import Timing


def _timing(step_s: float, device_s: float | None) -> Timing:
    est = {"step": {"median_s": step_s}}
    if device_s is not None:
        est["device"] = {"median_s": device_s}
    return Timing.from_json({"estimators": est})


def test_dispatch_share_only_where_the_device_times_its_own_ops_and_never_negative():
    from runner.worker.trace_facts import perturbation

    # CPU: the "device time" (the traced host thread, 93.7x the step plus one) gives no share
    cpu = perturbation([], [2e-3, 3e-3, 4e-3], _timing(1e-3, 94.7e-3), "cpu")
    assert cpu["profiler_slowdown"] == pytest.approx(3.0) and "dispatch_share" not in cpu
    assert cpu["traced_step_median_s"] == pytest.approx(3e-3) and cpu["op_events"] == 0
    # TPU: step 100 us, device 80 us: a fifth of the step is dispatch and sync
    tpu = perturbation([], [1e-4], _timing(1e-4, 8e-5), "tpu")
    assert tpu["dispatch_share"] == pytest.approx(0.2) and tpu["profiler_slowdown"] == pytest.approx(1.0)
    # a device time above the step is no device time: blank, not negative
    assert "dispatch_share" not in perturbation([], [1e-4], _timing(1e-4, 1.2e-4), "gpu")


def test_the_summary_blanks_a_cpu_dispatch_share_from_an_older_result():
    from analysis.runs.record import Result
    from analysis.runs.summary import _run_columns

    def share(backend, value):
        r = Result.from_json({"point": "0", "environment": {"backend": backend}, "trace": {"dispatch_share": value}})
        return _run_columns(r)["dispatch_share"]

    assert share("cpu", -93.7) is None  # what result.json files before this change hold
    assert share("tpu", 0.25) == 0.25
    assert share("gpu", -0.1) is None


def _pts(slowdowns, backend="cpu") -> pd.DataFrame:
    n = len(slowdowns)
    return pd.DataFrame(
        {
            "point": [str(i) for i in range(n)],
            "op": ["all_gather"] * n,
            "V_bytes": [float(32 << 10 << (2 * i)) for i in range(n)],
            "estimator": ["step"] * n,
            "time_rounds": [5] * n,
            "rounds_disagree": [False] * n,
            "dispatch_floor_s": [np.nan] * n,
            "profiler_slowdown": slowdowns,
            "dispatch_share": [np.nan] * n,
            "page_faults_per_step": [np.nan] * n,
            "backend": [backend] * n,
        }
    )


def test_the_sweep_report_names_the_points_whose_traces_are_unrepresentative():
    from analysis.report.measurement import measurement_text

    text = measurement_text(_pts([1.5, 51.0, 4.9, 7.25]))
    assert "tracing slowed a step 6.1x (range 1.5x to 51x: traced step / untraced step, measured per point)" in text
    assert (
        "2 point(s) traced more than 5x slower than untraced, so their traces (trace columns, overlap) are marked "
        "unrepresentative: all_gather 128 KiB 51x, all_gather 2 MiB 7.25x." in text
    )
    assert "No dispatch share on CPU" in text and "Dispatch share (step" not in text
    assert "No trace ran more than 5x its untraced step." in measurement_text(_pts([1.5, 4.9]))


def test_a_slow_trace_is_a_caveat_not_a_flag():
    from analysis.runs.summary import flags

    df = pd.DataFrame(
        {
            "status": ["ok", "ok"],
            "op": ["all_gather"] * 2,
            "group_size": [8, 8],
            "device_count": [8, 8],
            "S_bytes": [4.0 * (1 << 20)] * 2,
            "profiler_slowdown": [51.0, 5.0],
        }
    )
    out, caveats = flags(df)
    assert list(out) == ["", ""]  # the untraced timing stands: no fit leaves it out
    assert list(caveats) == [
        "trace unrepresentative: the traced step ran 51x the untraced one (above 5x); its timing is untraced "
        "and stands",
        "",
    ]


def test_the_profile_report_states_the_slowdown_it_measured_not_a_fixed_2x():
    from analysis.report.profile_report import slowdown_words

    assert slowdown_words(0.99) == "the profiler slowed this run's step 0.99x (traced step / untraced step, measured)"
    assert "cannot tell" in slowdown_words(None) and "2x" not in slowdown_words(None)


def test_the_report_says_how_points_meet_their_ceiling_and_where_it_is_in_doubt():
    from analysis.report.measurement import ceiling_text

    pts = _pts([1.0, 1.0, 1.0])
    assert ceiling_text(pts) == ""  # no ceiling (a matmul sweep): nothing to say
    pts["ceiling_busbw_Bps"] = [4e9, 4e9, 2e9]
    pts["ceiling_inconsistent"] = [None, "1 MiB: its median lies 6.0x below both neighbouring sizes", None]
    text = ceiling_text(pts)
    assert text.startswith("A point is flagged above its ceiling only when its bus bandwidth's 95% interval")
    assert text.endswith(
        "The ceiling is inconsistent at the sizes of 1 point(s) (their caveats say why): they are "
        "not flagged against it."
    )
