"""Which instructions of a compiled module execute its collectives, by the names a trace shows.

A profile names each device op after the *top-level* instruction that ran: an instruction of
the entry computation, or of a computation the entry runs as control flow (a while loop's body
and condition, a conditional's branches, a ``call``'s computation). An instruction nested in a
fusion's computation, or wrapped by an async op, never appears as an event of its own: the
fusion or the async pair does. :func:`collective_executions` maps those top-level names to the
collective kinds they run, in every shape XLA prints:

* a plain op: ``%psum.7 = f32[16] all-reduce(...)`` (JAX names it, the opcode says what it is);
* an async pair: ``all-gather-start`` / ``all-gather-done`` (both names: the trace shows both,
  and joins them into one execution named after the start);
* a generic async pair, ``async-start(...), calls=%c`` / ``async-done``, whose ``c`` holds a
  collective: the pair's names, and the wrapped instruction's own name too. XLA TPU shows the
  pair; XLA GPU runs a reduce-scatter or an all-to-all this way and names the NCCL kernel after
  the *wrapped* instruction (``thunk_emitter.cc``: the collective thunk's profile annotation is
  the wrapped instruction's; the wrapper's name only with ``xla_syntax_sugar_async_ops``, off by
  default), so its trace has no op named after the pair. Given the names a trace shows
  (``seen``), each such execution is listed under one of the two, never both: the wrapped
  name where the trace shows it, else the pair's;
* a ``fusion`` whose called computation holds a collective (XProf's ``all-gather fusion``,
  ``all-reduce fusion``; an all-reduce sliced by a ``dynamic-slice`` in the same computation
  is XLA TPU's ``all-reduce-scatter fusion``, which does a reduce-scatter's work: it counts as
  a reduce-scatter, not an all-reduce);
* ``call-start(...), to_apply=%c`` / ``call-done`` (a collective offloaded to the SparseCore).
"""

from __future__ import annotations

from collections.abc import Collection

from analysis.hlo.scan import KINDS, Module, scan

__all__ = ["collective_executions"]

# Attributes through which an instruction runs a computation as control flow: the called
# computation's own instructions are top-level ops of the trace.
_CONTROL = {
    "while": ("body", "condition"),
    "conditional": ("branch_computations", "true_computation", "false_computation"),
    "call": ("to_apply",),
}
# Wrappers whose called computation runs as ONE trace op (a fusion) or one start/done pair
# (``async-start``, and its printed sugar: ``call-start``, ``fusion-start``, ...).
_WRAPPED_BY = ("calls", "to_apply")


def collective_executions(text: str, seen: Collection[str] | None = None) -> dict[str, tuple[str, ...]]:
    """``{trace op name: collective kinds it runs}`` for every module in ``text``.

    Kinds are HLO opcodes of collectives (``all-gather``, ``all-reduce``, ...), sorted. Both
    halves of an async pair are listed under the kinds of the pair. A collective that only
    sits in a fusion's or a ``call-start``'s computation is listed under the wrapper's name,
    never its own; collectives in computations nothing top-level runs are not listed.

    A generic ``async-start``/``async-done`` pair may show in a trace under its own names (TPU)
    or under the wrapped instruction's (GPU's NCCL kernels). ``seen``, the op names a trace
    shows: the wrapped names where the trace shows any of them, else the pair's, so that
    summing the listed ops' times counts each execution once. Without ``seen``: both.
    """
    out: dict[str, tuple[str, ...]] = {}
    for mod in scan(text):
        out.update(_module_executions(mod, seen))
    return out


def _entry(mod: Module) -> str | None:
    if mod.entry is not None:
        return mod.entry
    if any(c == "" for c in mod.comp_of.values()):  # a bare snippet of instructions
        return ""
    return mod.comps[-1] if mod.comps else None  # XLA prints the entry computation last


def _members(mod: Module) -> dict[str, list[str]]:
    by_comp: dict[str, list[str]] = {}
    for name, comp in mod.comp_of.items():
        by_comp.setdefault(comp, []).append(name)
    return by_comp


def _called(mod: Module, name: str, keys: tuple[str, ...]) -> list[str]:
    return [c for k, c in mod.called.get(name, ()) if k in keys]


def _module_executions(mod: Module, seen: Collection[str] | None = None) -> dict[str, tuple[str, ...]]:
    entry = _entry(mod)
    if entry is None:
        return {}
    members = _members(mod)
    held_cache: dict[str, frozenset] = {}

    def held(comp: str, seen: frozenset = frozenset()) -> frozenset:
        """Collective kinds ``comp`` runs, itself or through any computation it calls."""
        if comp in held_cache:
            return held_cache[comp]
        if comp in seen:  # HLO has no recursion; a malformed text must not loop
            return frozenset()
        own: set[str] = set()
        nested: set[str] = set()
        names = members.get(comp, [])
        for name in names:
            code = mod.opcodes[name]
            base = code.removesuffix("-start")
            if code in KINDS or (code.endswith("-start") and base in KINDS):
                own.add(base)
            for _, sub in mod.called.get(name, ()):
                nested |= held(sub, seen | {comp})
        if "all-reduce" in own and any(mod.opcodes[n] == "dynamic-slice" for n in names):
            # an all-reduce that the same computation slices to this device's part: XLA TPU's
            # all-reduce-scatter fusion, which does a reduce-scatter's work, not an all-reduce's
            own = (own - {"all-reduce"}) | {"reduce-scatter"}
        held_cache[comp] = frozenset(own | nested)
        return held_cache[comp]

    dones: dict[str, list[str]] = {}
    for done, start in mod.started_by.items():
        dones.setdefault(start, []).append(done)

    out: dict[str, tuple[str, ...]] = {}
    todo, executed = [entry], set()
    while todo:  # the entry and what it runs as control flow, transitively
        comp = todo.pop()
        if comp in executed:
            continue
        executed.add(comp)
        for name in members.get(comp, []):
            code = mod.opcodes[name]
            base = code.removesuffix("-start")
            if code in KINDS:
                out[name] = (code,)
            elif code.endswith("-start") and base in KINDS:
                for n in [name, *dones.get(name, [])]:
                    out[n] = (base,)
            elif code == "fusion" or code.endswith("-start"):
                called = _called(mod, name, _WRAPPED_BY)
                kinds = frozenset().union(*(held(c) for c in called))
                if not kinds:
                    continue
                # a generic async wrapper: the wrapped instructions that run a collective, by
                # their own names (what a GPU trace shows)
                inner = {}
                if code == "async-start":
                    for c in called:
                        for n in members.get(c, []):
                            sub = mod.opcodes[n]
                            held_n = {sub} if sub in KINDS else set()
                            if sub == "fusion":
                                held_n = set().union(*(held(f) for f in _called(mod, n, ("calls",))))
                            if held_n:
                                inner[n] = tuple(sorted(held_n))
                if seen is not None and any(n in seen for n in inner):
                    out.update(inner)  # the trace names them after the wrapped instruction
                    continue
                for n in [name, *dones.get(name, [])]:
                    out[n] = tuple(sorted(kinds))
                if seen is None:
                    out.update(inner)
            elif code in _CONTROL:
                todo += _called(mod, name, _CONTROL[code])
    return out
