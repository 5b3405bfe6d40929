"""A profile read from disk: its xplane files and the HLO of the modules it ran, joined
into the tables of :mod:`analysis.profiling.profile` (the ``profile`` command and the sweep report's
step section both start here).

The HLO comes from ``--hlo`` (an ``--xla_dump_to`` folder, whose ``*after_optimizations.txt``
modules are matched to the trace's modules by name, or a ``compiled.as_text()`` file) or
from the profile itself: xprof's xplane keeps each compiled module as an ``HloProto`` (stat
``Hlo Proto`` on the ``/host:metadata`` plane), and jaxlib prints it back as HLO text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from analysis.hlo import async_pairs, instruction_opcodes, parse_collectives
from analysis.profiling import op_categories as cat
from analysis.profiling import profile as prof
from analysis.trace import device_ops, read_xplane
from analysis.trace.carried_hlo import hlo_protos

_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.MULTILINE)
_DUMP = re.compile(r"^module_(\d+)\.")


def find_xplanes(path: Path) -> list[Path]:
    """The ``.xplane.pb`` files of the newest session under ``path`` (all its hosts)."""
    if path.is_file():
        return [path]
    found = sorted(path.rglob("*.xplane.pb"))
    if not found:
        raise ValueError(f"no .xplane.pb under {path} (expected plugins/profile/<session>/<host>.xplane.pb)")
    newest = max({p.parent for p in found}, key=lambda d: (d.name, str(d)))
    return [p for p in found if p.parent == newest]


# ---------------------------------------------------------------- HLO carried by the xplane


def hlo_from_xplane(path: Path) -> dict[str, str]:
    """``{"jit_step(18)": HLO text}`` for every ``Hlo Proto`` the file's metadata plane holds
    (:func:`analysis.trace.carried_hlo.hlo_protos`); ValueError where protobuf refuses the file."""
    try:
        from jax._src.lib import (
            xla_client,  # prints an HloModuleProto as text (no public API does)
        )
    except ImportError:
        return {}

    texts: dict[str, str] = {}
    for name, module in hlo_protos(path):
        try:  # a proto this jaxlib cannot read (another XLA's): its text says so
            texts[name] = xla_client.XlaComputation(bytes(module)).as_hlo_text()
        except Exception as err:  # noqa: BLE001 - the C++ binding raises bare errors
            texts[name] = f"// unreadable by this jaxlib: {str(err).splitlines()[0] if str(err) else err!r}"
    return texts


_PROGRAM = re.compile(r"^(?P<module>.+)\((?P<program_id>\d+)\)$")


def program_modules(path: Path) -> dict[str, str]:
    """``{program_id: module name}`` of the HLO protos the file carries (each named
    ``module(program_id)``), without printing them."""
    return {m.group("program_id"): m.group("module") for name, _ in hlo_protos(path) if (m := _PROGRAM.match(name))}


def _by_module(texts: list[tuple[str, str]], notes: list[str]) -> dict[str, str]:
    """Module name (its ``HloModule`` header) -> text. Modules of one name that the profile
    tells apart by program id (keys ``name(program_id)``) are kept apart under those keys, the
    newest also under the bare name (for ops that carry no program id); of several of one name
    without ids (a dump folder, a file) the last wins (the dump's highest module number), and
    ``notes`` says so."""
    named = [(m.group(1) if (m := _HEADER.search(text)) else "", key, text) for key, text in texts]
    count: dict[str, int] = {}
    for name, _, _ in named:
        count[name] = count.get(name, 0) + 1
    out = {}
    for name, key, text in named:
        if count[name] > 1 and (m := _PROGRAM.match(key)) and m.group("module") == name:
            out[key] = text
        out[name] = text
    for name, n in count.items():
        if n > 1:
            keys = [k for nm, k, _ in named if nm == name]
            ids = [k for k in keys if _PROGRAM.match(k)]
            if len(ids) == n:
                notes.append(f"{n} modules named {name}: told apart by program id ({', '.join(ids)})")
            else:
                notes.append(f"{n} modules named {name}: the last ({keys[-1] or 'in the file'}) is used")
    return out


def _split_programs(ops: pd.DataFrame, texts: dict[str, str]) -> pd.DataFrame:
    """Ops of a module whose name several programs share get the key of their own program's
    HLO (``jit__lambda(19)``), from their ``program_id``."""
    if "program_id" not in ops or not any(_PROGRAM.match(k) for k in texts):
        return ops
    keyed = ops["hlo_module"].astype(str) + "(" + ops["program_id"].astype(str) + ")"
    return ops.assign(hlo_module=ops["hlo_module"].where(~keyed.isin(list(texts)), keyed))


def load_hlo(hlo: str | None, xplanes: list[Path]) -> tuple[dict[str, str], str]:
    """``{module name: HLO text}`` and where it came from."""
    if hlo is None:
        found = {}
        for p in xplanes:
            try:
                found.update(hlo_from_xplane(p))
            except (ValueError, IndexError) as err:  # bytes that are not protobuf
                raise ValueError(f"{p}: not a readable xplane trace ({err or 'truncated'})") from err
        if not found:
            raise ValueError(
                "the profile carries no HLO (no 'Hlo Proto' in its metadata plane): pass --hlo "
                "(an --xla_dump_to folder or a compiled.as_text() file)"
            )
        key = lambda k: int(m.group(1)) if (m := re.search(r"\((\d+)\)$", k)) else -1
        notes: list[str] = []
        texts = _by_module([(k, found[k]) for k in sorted(found, key=key)], notes)
        return texts, "; ".join(["the profile (xplane 'Hlo Proto')", *notes])
    path = Path(hlo)
    if path.is_dir():
        files = sorted(
            path.glob("*after_optimizations.txt"), key=lambda p: int(m.group(1)) if (m := _DUMP.match(p.name)) else -1
        )
        if not files:
            raise ValueError(f"{path} holds no *after_optimizations.txt (an --xla_dump_to folder?)")
        notes = []
        texts = _by_module([(p.name, p.read_text()) for p in files], notes)
        return texts, "; ".join([f"{path} (--xla_dump_to)", *notes])
    text = path.read_text()
    names = _HEADER.findall(text)
    if len(names) <= 1:
        return {names[0] if names else "": text}, str(path)
    chunks = re.split(r"(?m)^(?=\s*HloModule\s)", text)
    notes = []
    texts = _by_module([("", c) for c in chunks if _HEADER.search(c)], notes)
    return texts, "; ".join([str(path), *notes])


def _name_modules(ops, texts: dict[str, str]):
    """Give trace ops without a module name (a backend that records none, or an unnamed HLO
    snippet) the HLO module whose instructions they share most names with."""
    unnamed = ops["hlo_module"] == ""
    if not unnamed.any() or not texts:
        return ops
    names = set(ops.loc[unnamed, "hlo_op"])
    best = max(texts, key=lambda m: len(names & set(instruction_opcodes(texts[m]))))
    ops.loc[unnamed, "hlo_module"] = best
    return ops


def _groups_from_trace(module: str, records: list, hlo: str, ops: pd.DataFrame, ndev: int) -> list:
    """``records`` with the replica groups of the instruction text the trace carries (a TPU
    op's metadata name) where the HLO prints ``replica_groups={}`` but the trace's text names
    groups: an HLO printed back from a trace's proto may have lost them."""
    texts = ops.loc[(ops["hlo_module"] == module), ["hlo_op", "name"]].drop_duplicates("hlo_op")
    carried = {
        op: text
        for op, text in zip(texts["hlo_op"], texts["name"].astype(str))
        if " = " in text and "replica_groups=" in text and "replica_groups={}" not in text
    }
    out = []
    for c in records:
        text = carried.get(c.name)
        empty = re.search(rf"(?m)^\s*(?:ROOT\s+)?%?{re.escape(c.name)} = [^\n]*replica_groups=\{{\}}", hlo)
        found = parse_collectives(text, num_devices=ndev) if text is not None and empty else []
        if len(found) == 1 and found[0].replica_groups:
            g = found[0]
            c = replace(c, replica_groups=g.replica_groups, group_size=g.group_size, num_groups=g.num_groups)
        out.append(c)
    return out


@dataclass
class Profile:
    """What :func:`analyse` found: ``table`` (one row per collective instruction, see
    :func:`analysis.profiling.profile.collective_table`; empty where the HLO holds none), ``steps`` (per
    step and device), ``ops`` (every device op, labelled, categorised and assigned to its step),
    ``devices``, ``on_cpu`` and ``categories`` (the step's time by op category, see
    :func:`analysis.profiling.op_categories.category_table`)."""

    table: pd.DataFrame
    steps: pd.DataFrame
    ops: pd.DataFrame
    devices: int
    on_cpu: bool
    categories: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=cat.CATEGORY_COLUMNS))


def analyse(xplanes: list[Path], texts: dict[str, str], mesh: dict[str, int] | None = None, predict=None) -> Profile:
    """Join the trace's device ops to the HLO's collectives and op categories; ValueError when
    they do not fit (no device ops, no module of the HLO ran, a mesh of another size). A
    program without collectives gets an empty collective table and its time by op category.
    ``predict(collective, mesh axes)`` adds the model's time (see :func:`analysis.profiling.profile.hlo_table`)."""
    pairs = {k: v for t in texts.values() for k, v in async_pairs(t).items()}
    parts, on_cpu = [], False
    for path in xplanes:
        events = read_xplane(path)
        if events.empty:  # an empty or event-less file: nothing below can label it
            raise ValueError(f"{path}: the trace holds no events")
        ops = device_ops(events, pairs, program_modules(path))  # TPU ops name their module by program_id
        # a CPU trace's ops are the host's; a GPU trace's host events may carry hlo_op too (launches)
        on_cpu |= bool((ops["clock"] == "/host:CPU").any())
        if len(parts) and ops["device"].isin(pd.concat(parts)["device"]).any():  # local ordinals per host
            ops["device"] += int(pd.concat(parts)["device"].max()) + 1
        parts.append(ops.assign(host=path.name.removesuffix(".xplane.pb")))
    ops = pd.concat(parts, ignore_index=True)
    if ops.empty:
        raise ValueError(f"{xplanes[0].parent}: the trace holds no device-op events")
    ops = _split_programs(ops, texts)
    if list(texts) == [""] and ops["hlo_module"].nunique() == 1:  # an unnamed snippet, one module ran
        texts = {ops["hlo_module"].iloc[0]: texts[""]}
    ops = _name_modules(ops, texts)
    ran = set(ops["hlo_module"])
    matched = {m: t for m, t in texts.items() if m in ran}
    if not matched:
        raise ValueError(
            f"the HLO ({', '.join(sorted(texts)) or 'unnamed'}) matches no module the trace ran "
            f"({', '.join(sorted(ran))})"
        )
    ndev = int(ops["device"].nunique())
    if mesh is not None and math.prod(mesh.values()) != ndev:
        raise ValueError(f"--mesh has {math.prod(mesh.values())} devices, the trace {ndev}")
    sized = re.compile(r"\b(num_partitions|replica_count)=")  # else replica_groups={} spans the trace's devices
    colls = {m: parse_collectives(t, num_devices=None if sized.search(t) else ndev) for m, t in matched.items()}
    colls = {m: _groups_from_trace(m, c, matched[m], ops, ndev) for m, c in colls.items()}
    if any(colls.values()):
        colls = {m: c for m, c in colls.items() if c}  # a step is an execution of a module with collectives
        matched = {m: matched[m] for m in colls}
    # else no module holds a collective (a one-device step, say): each module that ran is
    # profiled by op category alone, and the collective table is empty
    opcodes = {k: v for m in matched.values() for k, v in instruction_opcodes(m).items()}
    hlo_df = prof.hlo_table(colls, mesh, predict)
    names = {c.name for cs in colls.values() for c in cs}
    ops = prof.assign_steps(prof.label_ops(ops[ops["hlo_module"].isin(list(matched))], names, opcodes))
    ops = cat.label_categories(ops, {m: cat.instruction_categories(t) for m, t in matched.items()})
    steps = prof.step_table(ops)
    table = prof.collective_table(ops, hlo_df, steps)
    return Profile(table, steps, ops, ndev, on_cpu, cat.category_table(ops))
