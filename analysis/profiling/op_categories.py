"""A step's time by op category, as XProf's op profile groups it (tables only; the command
is :mod:`analysis.cli.profile`, the report :mod:`analysis.report.profile_report`).

For a step with no collective (a one-device program, say) this is the whole answer to "where
does my step's time go"; beside a profile's collectives it is the rest of the step. The input
is :func:`analysis.trace.device_ops` rows labelled with their module and step
(:func:`analysis.profiling.profile.assign_steps`); the output a DataFrame (:data:`CATEGORY_COLUMNS`).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.hlo.lex import blank_strings, strip_comments
from analysis.hlo.scan import scan

# XProf's op profile groups a step's ops by category: the ``hlo_category`` a TPU trace carries
# on each op's metadata, else (GPU, CPU) the category XLA's HloInstruction::ToCategory gives the
# compiled instruction (xprof/utils/hlo_module_map.cc), which these tables follow: copy,
# transpose and reshape are "data formatting"; a fusion is "<kind> fusion" ("loop", "input",
# "output", "custom"); a convolution is "convolution", with " base-dilated" / " window-dilated";
# any other elementwise op is "non-fusion elementwise"; the rest is the opcode ("dot",
# "custom-call", "while", "all-reduce", ...).
CATEGORY_COLUMNS = [
    "hlo_module",
    "category",
    "ops",
    "executions_per_step",
    "time_per_step_s",
    "share",
    "top_op",
    "top_op_holds",
    "top_op_share",
]
_DATA_FORMATTING = frozenset({"copy", "transpose", "reshape", "dynamic-reshape"})
# HloInstruction::IsElementwise for an instruction outside a fusion (dynamic-update-slice is
# elementwise on one operand only, so not as a whole)
_ELEMENTWISE = frozenset(
    "abs round-nearest-afz round-nearest-even ceil clz convert bitcast-convert cos erf exp expm1 floor imag "
    "is-finite log log1p not negate popcnt real reduce-precision rsqrt logistic sign sin sqrt cbrt tan tanh "
    "add atan2 compare complex divide maximum minimum multiply power remainder subtract and or xor shift-left "
    "shift-right-arithmetic shift-right-logical stochastic-convert select clamp map".split()
)
_FUSION_KIND = {
    "kLoop": "loop fusion",
    "kInput": "input fusion",
    "kOutput": "output fusion",
    "kCustom": "custom fusion",
}
_HEAVY = ("convolution", "dot", "ragged-dot")  # what a user looks for inside a fusion: where the matmul went
_INSTR_LINE = re.compile(r"(?m)^[ \t]*(?:ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*([^\n]*)$")
_FUSION_KIND_RE = re.compile(r"\bkind=(k[A-Za-z]+)")
_TARGET_RE = re.compile(r'\bcustom_call_target="([^"]*)"')
_DILATE_RE = re.compile(r"\b(lhs|rhs)_dilate=([0-9x]+)")


def instruction_categories(text: str) -> dict[str, tuple[str, str]]:
    """``{instruction: (category, holds)}`` for every instruction of the HLO ``text`` (one
    module): its category as XLA's ``ToCategory`` names it (see above), and what it holds that
    a reader looks for: the dots and convolutions of the computation a fusion (or an async op)
    runs as one op, or a custom-call's target (``__cudnn$convForward``, ``tpu_custom_call``)."""
    mods = scan(text)
    opcodes = {k: v for m in mods for k, v in m.opcodes.items()}
    members: dict[str, list[str]] = {}
    called: dict[str, tuple] = {}
    for m in mods:
        for name, comp in m.comp_of.items():
            members.setdefault(comp, []).append(name)
        called.update(m.called)
    lines = {m.group(1): m.group(2) for m in _INSTR_LINE.finditer(strip_comments(text))}
    held: dict[str, frozenset] = {}

    def heavy(comp: str, seen: frozenset = frozenset()) -> frozenset:
        if comp in held or comp in seen:
            return held.get(comp, frozenset())
        found = set()
        for n in members.get(comp, []):
            if opcodes.get(n) in _HEAVY:
                found.add(opcodes[n])
            for _, sub in called.get(n, ()):
                found |= heavy(sub, seen | {comp})
        held[comp] = frozenset(found)
        return held[comp]

    out = {}
    for name, code in opcodes.items():
        line = lines.get(name, "")
        attrs = blank_strings(line) if '"' in line else line
        holds = ""
        if code == "fusion":
            kind = _FUSION_KIND_RE.search(attrs)
            category = _FUSION_KIND.get(kind.group(1), "fusion") if kind else "fusion"
        elif code == "convolution":
            dil = {side for side, vals in _DILATE_RE.findall(attrs) if any(v not in ("", "1") for v in vals.split("x"))}
            category = "convolution" + " base-dilated" * ("lhs" in dil) + " window-dilated" * ("rhs" in dil)
        elif code in _DATA_FORMATTING:
            category = "data formatting"
        elif code in _ELEMENTWISE:
            category = "non-fusion elementwise"
        else:
            category = code
        if code == "custom-call":
            target = _TARGET_RE.search(line)
            holds = target.group(1) if target else ""
        elif code in _HEAVY:
            holds = code
        elif code == "fusion" or code.endswith("-start"):
            # runs its computation as ONE op (a while loop's body runs as ops of their own)
            inner = frozenset().union(*(heavy(c) for attr, c in called.get(name, ()) if attr in ("calls", "to_apply")))
            holds = "+".join(k for k in _HEAVY if k in inner)
        out[name] = (category, holds)
    return out


def self_time_ns(ops: pd.DataFrame) -> np.ndarray:
    """Each op's own time: its duration less that of the ops nested inside it on its device (a
    while loop's event spans its body's ops on CPU and TPU; XProf counts an op's self time).
    Without nesting (a check over all rows at once) that is the duration itself."""
    dur = ops["duration_ns"].to_numpy(float).copy()
    if ops.empty:
        return dur
    order = np.lexsort((-ops["end_ns"].to_numpy(float), ops["start_ns"].to_numpy(float), ops["device"].to_numpy()))
    dev = ops["device"].to_numpy()[order]
    start = ops["start_ns"].to_numpy(float)[order]
    end = ops["end_ns"].to_numpy(float)[order]
    reach = pd.Series(end).groupby(dev).cummax().groupby(dev).shift(1).to_numpy(float)  # NaN: a device's first op
    inside = end <= reach  # starts no earlier than, and ends no later than, an op before it
    if not inside.any():
        return dur
    own = dur[order]
    stack: list[int] = []
    for i in range(len(order)):
        if i == 0 or dev[i] != dev[i - 1]:
            stack = []
        while stack and end[stack[-1]] <= start[i]:  # ended before this op began
            stack.pop()
        if inside[i]:
            parent = next((j for j in reversed(stack) if end[i] <= end[j]), None)  # the innermost holding it
            if parent is not None:
                own[parent] -= dur[order[i]]
        stack.append(i)
    out = np.empty_like(dur)
    out[order] = np.maximum(own, 0.0)
    return out


def label_categories(ops: pd.DataFrame, categories: dict[str, dict[str, tuple[str, str]]]) -> pd.DataFrame:
    """``ops`` with ``category`` (the trace's ``hlo_category`` where it carries one, else
    :func:`instruction_categories` of its module's HLO, ``categories`` by module; ``unknown``
    for an op the HLO does not name), ``holds`` and ``self_ns`` (:func:`self_time_ns`)."""
    # looked up once per distinct op of each module, not per row (a 1 M-event trace repeats a few hundred)
    category = np.full(len(ops), "unknown", object)
    holds = np.full(len(ops), "", object)
    module = ops["hlo_module"].to_numpy(object)
    for name, table in categories.items():
        at = np.flatnonzero(module == name)
        if not len(at):
            continue
        codes, ops_named = pd.factorize(ops["hlo_op"].iloc[at])
        found = [table.get(str(op), ("unknown", "")) for op in ops_named]
        category[at] = np.array([c for c, _ in found], object)[codes]
        holds[at] = np.array([h for _, h in found], object)[codes]
    if "hlo_category" in ops:  # the category a TPU trace carries, where it carries one
        carried = ops["hlo_category"]
        at = np.flatnonzero(carried.notna().to_numpy(bool))
        text = carried.iloc[at].astype(str).to_numpy(object)
        keep = (text != "") & (text != "None")
        category[at[keep]] = text[keep]
    return ops.assign(category=category, holds=holds, self_ns=self_time_ns(ops))


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a / b``, NaN where ``b`` is 0."""
    return np.divide(a, b, out=np.full(len(a), np.nan), where=b > 0)


def category_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Per module and op category (:func:`label_categories`'s ops, stepped): the step's time
    in it, as XProf's op profile adds it up (each op's self time), as a mean per step and
    device, so that a module's categories add up to its device time per step (the time its
    ops ran, idle gaps left out); ``share`` of that time; and the op that took most of it, with
    what it holds (the dot, the convolution, a custom call's target)."""
    stepped = ops[ops["step"].to_numpy() >= 0]
    if stepped.empty:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    keys = ["hlo_module", "category"]
    # per (module, op) first, on integer codes: a 1 M-event trace's ops are a few hundred
    m_codes, modules = pd.factorize(stepped["hlo_module"])
    o_codes, names = pd.factorize(stepped["hlo_op"])
    width = max(len(names), 1)
    inverse, pairs = pd.factorize(m_codes.astype(np.int64) * width + o_codes)
    first = np.empty(len(pairs), np.int64)
    first[inverse] = np.arange(len(inverse))  # a row of each op: its category and holds (one per op)
    per_op = pd.DataFrame(
        {
            "hlo_module": np.asarray(modules, object)[pairs // width],
            "hlo_op": np.asarray(names, object)[pairs % width],
            "category": stepped["category"].to_numpy(object)[first],
            "holds": stepped["holds"].to_numpy(object)[first],
            "t": np.bincount(inverse, weights=stepped["self_ns"].to_numpy(float), minlength=len(pairs)),
            "n": np.bincount(inverse, minlength=len(pairs)),
        }
    )
    step = stepped["step"].to_numpy(np.int64)
    device = stepped["device"].to_numpy(np.int64)
    device_key = (m_codes.astype(np.int64) * (step.max() + 1) + step) * (device.max() + 1) + device
    distinct = pd.unique(device_key) // ((step.max() + 1) * (device.max() + 1))
    device_steps = pd.Series(np.bincount(distinct, minlength=len(modules)), index=np.asarray(modules, object))
    out = per_op.groupby(keys, sort=False).agg(ops=("hlo_op", "nunique"), n=("n", "sum"), t=("t", "sum")).reset_index()
    top = per_op.sort_values("t", ascending=False, kind="stable").groupby(keys).head(1).set_index(keys)
    at = pd.MultiIndex.from_frame(out[keys])
    t = out["t"].to_numpy(float)
    steps = out["hlo_module"].map(device_steps).to_numpy(float)
    module_t = out.groupby("hlo_module")["t"].transform("sum").to_numpy(float)
    out["executions_per_step"] = out["n"] / steps
    out["time_per_step_s"] = t / steps * 1e-9
    out["share"] = _ratio(t, module_t)
    out["top_op"] = top["hlo_op"].reindex(at).to_numpy()
    out["top_op_holds"] = top["holds"].reindex(at).to_numpy()
    out["top_op_share"] = _ratio(top["t"].reindex(at).to_numpy(float), t)
    out["_module_t"] = module_t
    out = out.sort_values(["_module_t", "hlo_module", "t"], ascending=[False, True, False], kind="stable")
    return out[CATEGORY_COLUMNS].reset_index(drop=True)
