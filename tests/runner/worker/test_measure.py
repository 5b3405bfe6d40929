"""A point's first round records what the compiled step really runs: an all-reduce that XLA
compiled as a reduce-scatter fusion and an all-gather is recorded so (``spec.rewritten``), from
the compiled HLO the point itself dumps (:mod:`runner.worker.trace_facts` reads it; its tests
cover the readings)."""

from __future__ import annotations

from hlo_samples import TPU_AR_SPLIT


class _CompiledAs:
    """A compiled step that runs as itself but prints ``text`` as its compiled HLO."""

    def __init__(self, compiled, text: str):
        self.compiled, self.text = compiled, text

    def __call__(self, *args):
        return self.compiled(*args)

    def as_text(self) -> str:
        return self.text


def test_a_point_whose_compiled_step_runs_other_collectives_records_so(compose_cfg, tmp_path, monkeypatch):
    from runner.config.spec import build_spec
    from runner.worker import measure, point_cache

    real_prepare = measure.prepare

    def prepare(spec, phase, record=None):  # the step as XLA TPU would have compiled it
        point = real_prepare(spec, phase, record)
        point.compiled = _CompiledAs(point.compiled, TPU_AR_SPLIT)
        return point

    monkeypatch.setattr(measure, "prepare", prepare)
    quick = ["op=all_reduce", "timing.min_iters=5", "timing.budget_s=0.2", "trace.enabled=false", "timing.loop=false"]
    record: dict = {}
    try:
        measure.measure(build_spec(compose_cfg(quick)), tmp_path, record)
    finally:
        point_cache.clear()
    assert record["spec"].rewritten == "compiled as reduce-scatter + all-gather: timed by those"
    # (a point that runs its collective as itself records none: tests/runner/worker/programs/test_loop.py's real run)


def test_a_trace_the_tables_do_not_time_by_ends_within_trace_inspect_max_s(compose_cfg, tmp_path, monkeypatch):
    """On CPU under auto the trace's device times are no headline: its traced steps end within
    ``trace.inspect_max_s``, in the default policy as in the quick look (which also traces one
    step); where device is the estimator the tables use, within ``trace.max_s``."""
    from runner.config.spec import build_spec
    from runner.worker import measure, point_cache, tracing

    seen = []
    real = tracing.capture

    def capture(step, trace_dir, trace, *args, **kwargs):
        seen.append((trace["iters"], trace["max_s"]))
        return real(step, trace_dir, trace, *args, **kwargs)

    monkeypatch.setattr(tracing, "capture", capture)
    fast = ["op.size_bytes=64KiB", "timing.min_iters=5", "timing.budget_s=0.05", "timing.loop=false"]
    limits = ["trace.max_s=0.7", "trace.inspect_max_s=0.03"]
    try:
        for i, policy in enumerate(([], ["timing=quick"], ["timing.estimator=device"])):
            measure.measure(build_spec(compose_cfg([*policy, *fast, *limits])), tmp_path / str(i), {})
    finally:
        point_cache.clear()
    assert seen == [(10, 0.03), (1, 0.03), (10, 0.7)]
