"""The *loop* estimator's programs: a measured program repeated K times inside one jitted
call, so the host's dispatch and sync are paid once per call, not once per repetition.

K is a static argument: one compile per K, and XLA knows the trip count. With K a device
scalar, XLA's GPU while loop copies the loop condition to the host and waits for it every
iteration (xla/backends/gpu/runtime/while_thunk.cc runs its body ``trip_count`` times without
looking at the condition only when the compiled loop carries ``known_trip_count``); a
constant bound gives every backend that annotation. The estimator times two trip counts,
K1 < K2, and takes the slope (:func:`runner.worker.timing.time_loop`), so what a call pays once (the
dispatch and sync) cancels. The loop's inputs are donated and each call's output is the next
call's input: without that, XLA copies every input before the while loop on every call (a
16 MiB ReduceScatter's call paid about 35 ms for it here, against 1.6 ms donated).

Each repetition must really run. A collective whose input does not change from one
repetition to the next is loop-invariant, and XLA hoists it out of the loop (seen with
jax 0.10: an ``optimization_barrier`` around the carry did not stop it, and the collective
then ran once). So each input takes one element of the program's output before the next
repetition: a one-element ``dynamic-update-slice`` per device, inside ``shard_map`` so it
moves no data between devices. Not ``x.at[0].set(v)``: that is a scatter, whose bounds check
(a ``select`` reading the old element, fused with the update) kept XLA's CPU backend from
updating in place, so every repetition copied the whole input (a 64 MiB AllToAll's loop read
1.5-1.75x its step). :func:`loop_check` then confirms in the compiled HLO that
the program runs the step's collectives K times.

The same loop with an empty body (:func:`empty_looped`: the same carry, each repetition adding
1 to one element of every input, in place, and no op) times what a repetition costs the loop
itself: on a GPU each repetition launches its kernels from the host, and for a small op that
launch rate, not the op, sets the slope (a 1024^2 matmul on an H200: device 7.6 us, loop
24.5 us). :func:`runner.worker.timing.time_loop` times it beside the loop and
:func:`runner.worker.estimators.summarise` flags the loop where it is a large share.
"""

from __future__ import annotations

import functools
import re
import time
from collections import Counter
from collections.abc import Callable

import jax
import jax.numpy as jnp

from analysis.hlo import parse_collectives


def looped(fn: Callable, mesh: jax.sharding.Mesh) -> Callable:
    """``run(args, k)``: ``fn(*args)`` k times (k a Python int, static: one compile per K, a
    known trip count), each repetition's inputs depending on the previous output. ``args`` is
    donated; the result is the inputs the last repetition left, ready for the next call."""

    def depend(n_in, *xs):
        # per device: element 0 of every input takes the sum of element 0 of every output
        # (every output, so that none is dead code: a training step's gradients too)
        out = sum(o.reshape(-1)[0].astype(jnp.float32) for o in xs[n_in:])
        return tuple(
            jax.lax.dynamic_update_slice(x, out.astype(x.dtype).reshape((1,) * x.ndim), (0,) * x.ndim)
            for x in xs[:n_in]
        )

    def run(args, k):
        def body(_, a):
            outs = jax.tree.leaves(fn(*a))
            specs = tuple(jax.typeof(x).sharding.spec for x in a)
            out_specs = tuple(jax.typeof(o).sharding.spec for o in outs)
            return jax.shard_map(
                functools.partial(depend, len(a)),
                mesh=mesh,
                in_specs=specs + out_specs,
                out_specs=specs,
                check_vma=False,
            )(*a, *outs)

        return jax.lax.fori_loop(0, k, body, tuple(args))

    return jax.jit(run, static_argnums=1, donate_argnums=0)


def _bump(*xs):
    """Per device: element 0 of every input plus 1, in place (a one-element
    ``dynamic-update-slice`` reading only the element it writes), so that no repetition of an
    empty loop is the same as the one before and XLA can neither drop nor merge them."""
    return tuple(
        jax.lax.dynamic_update_slice(
            x, (x.reshape(-1)[0].astype(jnp.float32) + 1).astype(x.dtype).reshape((1,) * x.ndim), (0,) * x.ndim
        )
        for x in xs
    )


@functools.lru_cache(maxsize=8)
def empty_looped(mesh: jax.sharding.Mesh) -> Callable:
    """``run(args, k)``: the loop of :func:`looped` with an empty body, ``args`` carried k times
    (k static) with one element of each bumped per repetition and no op. One jitted function
    per mesh: points whose inputs have the same shapes and shardings share its compiles."""

    def run(args, k):
        def body(_, a):
            specs = tuple(jax.typeof(x).sharding.spec for x in a)
            return jax.shard_map(_bump, mesh=mesh, in_specs=specs, out_specs=specs, check_vma=False)(*a)

        return jax.lax.fori_loop(0, k, body, tuple(args))

    return jax.jit(run, static_argnums=1, donate_argnums=0)


def empty_loop_check(hlo_text: str, K: int) -> str:
    """Why the compiled empty loop of trip count ``K`` does not time K repetitions ("" where it
    does): it must keep a while loop whose known trip count divides K (XLA may unroll by a
    factor, never remove it: a loop XLA removed would time nothing)."""
    trips = [int(n) for n in _TRIP.findall(hlo_text)]
    if any(n and K % n == 0 for n in trips):
        return ""
    return f"XLA kept no while loop of K={K} repetitions" + (f" (trip counts {trips})" if trips else "")


class LoopPrograms:
    """The loop programs of one step, compiled per K on first use and checked against the
    step's compiled HLO; ``check`` holds the last check (see :func:`loop_check`). Beside them,
    the empty loop's (:func:`empty_looped`), whose calls are ``empty`` (None where XLA did not
    keep it; ``check["empty_loop"]`` says why)."""

    def __init__(self, fn: Callable, mesh: jax.sharding.Mesh, args: tuple, step_hlo: str):
        self.run, self.args, self.step_hlo = looped(fn, mesh), tuple(args), step_hlo
        self.run_empty = empty_looped(mesh)
        self.carry: tuple | None = None  # the loop's own copy of the inputs, donated call after call
        self.compiled: dict[int, object] = {}
        self.compiled_empty: dict[int, object] = {}
        self.empty_checks: dict[int, str] = {}  # K -> why its empty loop times nothing ("" where it does)
        # K -> its check, made once with its compile: a kept point's later rounds reuse both
        self.checks: dict[int, dict] = {}
        self.check: dict | None = None
        self.empty: list[Callable] | None = None  # the empty loop's calls, per K of the last calls()
        self.compile_s = 0.0  # seconds the last calls() spent compiling and checking

    def calls(self, Ks) -> list[Callable] | None:
        """A blocking call per K of ``Ks``, or None when a program could not be built or does
        not repeat the step's collectives K times (``check`` says why). Sets ``empty``, the
        empty loop's calls at the same Ks (they share the loop's carry)."""
        t0 = time.perf_counter()
        try:
            for K in Ks:
                if K not in self.compiled:
                    self.compiled[K] = self.run.lower(self.args, K).compile()
                if K not in self.checks:
                    self.checks[K] = loop_check(self.step_hlo, self.compiled[K].as_text(), K)
            empty_why = self._compile_empty(Ks)
        except Exception as exc:  # noqa: BLE001 - a user's program may not loop: the step estimator stays
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.check = {"ok": False, "why": f"the loop program could not be built: {first}"}
            self.empty = None
            return None
        finally:
            self.compile_s = time.perf_counter() - t0
        checks = {K: self.checks[K] for K in Ks}
        bad = [c for c in checks.values() if not c["ok"]]
        self.check = bad[0] if bad else dict(checks[max(checks)], Ks=list(Ks), empty_loop=empty_why or "ok")
        self.empty = None if empty_why else [functools.partial(self._call, self.compiled_empty[K]) for K in Ks]
        if bad:
            return None
        return [functools.partial(self._call, self.compiled[K]) for K in Ks]

    def _compile_empty(self, Ks) -> str:
        """Compile the empty loop at each K of ``Ks``; why it cannot time them ("" where it can)."""
        try:
            for K in Ks:
                if K not in self.compiled_empty:
                    self.compiled_empty[K] = self.run_empty.lower(self.args, K).compile()
                    self.empty_checks[K] = empty_loop_check(self.compiled_empty[K].as_text(), K)
        except Exception as exc:  # noqa: BLE001 - the loop estimator stands without its floor
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"the empty loop could not be built: {first}"
        return next((self.empty_checks[K] for K in Ks if self.empty_checks[K]), "")

    def _call(self, compiled):
        if self.carry is None:  # the step keeps its own inputs: the loop donates a copy
            self.carry = tuple(jnp.copy(a) for a in self.args)
        self.carry = jax.block_until_ready(compiled(self.carry))
        return self.carry


_WHILE = re.compile(r"\bwhile\(.*?\bbody=%?([\w.\-]+)")
_COMP_HEAD = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*\(")
_CALLS = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations)=\{?%?([\w.\-]+)")


def loop_computations(hlo_text: str) -> set[str]:
    """The computations a ``while`` body runs: the bodies and everything they call."""
    calls: dict[str, set[str]] = {}
    comp = None
    bodies: set[str] = set()
    for line in hlo_text.splitlines():
        head = _COMP_HEAD.match(line)
        if head and line.rstrip().endswith("{") and "=" not in line.split("(", 1)[0]:
            comp = head.group(1)
            calls.setdefault(comp, set())
            continue
        if comp is None:
            continue
        calls[comp].update(_CALLS.findall(line))
        bodies.update(_WHILE.findall(line))
    seen, todo = set(), list(bodies)
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo += calls.get(c, ())
    return seen


_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_COND = re.compile(r"\bcondition=%?([\w.\-]+)")


def _call_graph(hlo_text: str) -> tuple[str | None, dict[str, list[tuple[str, int | None]]]]:
    """The entry computation and, per computation, what it runs and how often per run of it:
    a while body its known trip count (None where XLA did not annotate one), anything else once."""
    calls: dict[str, list[tuple[str, int | None]]] = {}
    comp = entry = None
    for line in hlo_text.splitlines():
        head = _COMP_HEAD.match(line)
        if head and line.rstrip().endswith("{") and "=" not in line.split("(", 1)[0]:
            comp = head.group(1)
            calls.setdefault(comp, [])
            entry = comp if line.lstrip().startswith("ENTRY") else entry
            continue
        if comp is None:
            continue
        body = _WHILE.search(line)
        if body:
            trip = _TRIP.search(line)
            n = int(trip.group(1)) if trip else None
            calls[comp].append((body.group(1), n))
            if cond := _COND.search(line):  # the condition runs once more than the body
                calls[comp].append((cond.group(1), None if n is None else n + 1))
        else:
            calls[comp].extend((c, 1) for c in _CALLS.findall(line))
    return entry or (list(calls)[-1] if calls else None), calls


def executions(hlo_text: str, collectives) -> Counter | None:
    """How many times one run of the module executes each collective kind (while bodies times
    their known trip counts); None when a loop holding a collective has no known trip count."""
    entry, calls = _call_graph(hlo_text)
    own: dict[str, Counter] = {}
    for c in collectives:
        own.setdefault(c.computation, Counter())[c.kind] += 1
    memo: dict[str, Counter | None] = {}

    def runs(comp: str, depth: int = 0) -> Counter | None:
        if comp in memo:
            return memo[comp]
        total = Counter(own.get(comp, {}))
        for callee, n in calls.get(comp, ()):
            sub = runs(callee, depth + 1) if depth < 64 else None
            if sub is None or (n is None and sub):
                memo[comp] = None
                return None
            for kind, count in sub.items():
                total[kind] += count * (n or 0)
        memo[comp] = total
        return total

    return runs(entry) if entry is not None else Counter()


def _multiple(body: Counter, step: Counter) -> int | None:
    """m where ``body`` holds each of the step's collectives exactly m >= 1 times, else None."""
    if not step or set(body) != set(step):
        return None
    ms = {body[k] / step[k] for k in step}
    m = ms.pop()
    return int(m) if not ms and m >= 1 and m == int(m) else None


def loop_check(step_hlo: str, loop_hlo: str, K: int | None = None) -> dict:
    """Whether the loop program runs the step's collectives K times: each kind executed K times
    as often as in one step, counting while bodies by XLA's known trip count, so a body that XLA
    unrolled into a whole multiple of the step's collectives (and any iterations it peeled off
    the loop) passes. Without a trip count in the HLO (or without K): the collectives of the
    while bodies must be a whole multiple of the step's. ``ok`` false: the loop estimator is
    not used; ``why`` says what XLA did instead."""
    step_cols, loop_cols = parse_collectives(step_hlo), parse_collectives(loop_hlo)
    step = Counter(c.kind for c in step_cols)
    inside = loop_computations(loop_hlo)
    body = Counter(c.kind for c in loop_cols if c.computation in inside)
    unroll = _multiple(body, step)
    step_runs, loop_runs = executions(step_hlo, step_cols), executions(loop_hlo, loop_cols)
    counted = K is not None and step_runs is not None and loop_runs is not None
    if counted:
        ok = loop_runs == Counter({k: K * v for k, v in step_runs.items()}) and bool(inside or step_runs)
    else:
        ok = bool(inside) and (unroll is not None or (not step and not body))
    if ok:
        why = ""
    elif not inside and not loop_runs:
        why = "no while loop in the compiled program"
    elif counted:
        why = (
            f"the loop program runs {dict(sorted(loop_runs.items())) or 'no collectives'}, not K={K} times the "
            f"step's {dict(sorted(step_runs.items())) or 'none'} (XLA moved or removed a repetition)"
        )
    else:
        why = (
            f"the step has {sorted(step.elements()) or 'no collectives'} but the loop body has "
            f"{sorted(body.elements()) or 'none'}, not a whole multiple (XLA moved or removed a repetition)"
        )
    return {
        "ok": ok,
        "K": K,
        "step_collectives": sorted(step.elements()),
        "loop_collectives": sorted(body.elements()),
        "unroll": unroll,
        "executions": dict(sorted(loop_runs.items())) if loop_runs is not None else None,
        "why": why,
    }
