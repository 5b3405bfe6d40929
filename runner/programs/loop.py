"""The *loop* estimator's program: a measured program repeated K times inside one jitted
call, so the host's dispatch and sync are paid once for K repetitions.

Each repetition must really run. A collective whose input does not change from one
repetition to the next is loop-invariant, and XLA hoists it out of the loop (seen with
jax 0.10: an ``optimization_barrier`` around the carry did not stop it, and the collective
then ran once). So each input takes one element of the program's output before the next
repetition: a one-element ``dynamic-update-slice`` per device, inside ``shard_map`` so it
moves no data between devices. :func:`loop_check` then confirms in the compiled HLO that
the collectives sit inside the loop's body.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp


def looped(fn: Callable, mesh: jax.sharding.Mesh) -> Callable:
    """``run(args, k)``: ``fn(*args)`` k times (k a traced int32, so one compile serves any K),
    each repetition's inputs depending on the previous output."""

    def depend(n_in, *xs):
        # per device: element 0 of every input takes the sum of element 0 of every output
        # (every output, so that none is dead code: a training step's gradients too)
        out = sum(o.reshape(-1)[0].astype(jnp.float32) for o in xs[n_in:])
        return tuple(x.at[(0,) * x.ndim].set(out.astype(x.dtype)) for x in xs[:n_in])

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

    return jax.jit(run)


def k_arg(k: int) -> jax.Array:
    """K as the loop program takes it (a device scalar: no recompile for another K)."""
    return jnp.int32(k)


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


def loop_check(step_hlo: str, loop_hlo: str) -> dict:
    """Whether the loop program repeats the step's collectives: the same collective opcodes,
    each inside a ``while`` body. ``ok`` false means the loop estimator is not used."""
    from analysis.hlo import parse_collectives

    step = sorted(c.kind for c in parse_collectives(step_hlo))
    loop = parse_collectives(loop_hlo)
    inside = loop_computations(loop_hlo)
    in_loop = sorted(c.kind for c in loop if c.computation in inside)
    ok = bool(inside) and in_loop == step
    why = (
        ""
        if ok
        else "no while loop in the compiled program"
        if not inside
        else f"the step has {step or 'no collectives'} but the loop body has {in_loop or 'none'} "
        "(XLA moved or removed a repetition)"
    )
    return {"ok": ok, "step_collectives": step, "loop_collectives": in_loop, "why": why}
