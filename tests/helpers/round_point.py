"""A stand-in for the point :func:`runner.worker.point_round.time_round` times: a step that
returns at once, and loop programs XLA kept none of (``calls`` records the trip counts asked
for and returns None), with the smallest timing section a round reads. For tests of what a
round asks of the loop programs, without compiling anything."""

from __future__ import annotations


class Arr:
    """What a step returns: blocks at once."""

    def block_until_ready(self):
        return self


class Loop:
    """The loop programs of a point, as time_round sees them: none kept by XLA."""

    check, compile_s, empty = {"ok": False, "why": "stand-in"}, 0.125, None

    def __init__(self):
        self.asked = []

    def calls(self, Ks):
        self.asked.append(Ks)
        return None


class Point:
    def __init__(self):
        self.loop, self.loop_check = Loop(), None

    def step(self):
        return Arr()


# the timing keys a round reads: 5 samples, no warm-up to settle, no budget
TIMING = {
    "warmup_min_iters": 1,
    "warmup_max_s": 0.0,
    "max_iters": 5,
    "iters_per_sample": 1,
    "budget_s": 0.0,
    "later_budget_s": 0.0,  # every spec has it (runner.config.spec checks it)
    "min_iters": 5,
    "target_rel_ci": 0.05,
    "loop_target_s": 0.02,
}
