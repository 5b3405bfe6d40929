"""``python -m analysis profile LOGDIR``: what each collective of a profiled program cost.

LOGDIR is what ``jax.profiler.start_trace(LOGDIR)`` wrote (``plugins/profile/<session>/
<host>.xplane.pb``, one file per host; the newest session is read), a session folder, or one
``.xplane.pb``. The HLO names the collectives and sizes them; it comes from ``--hlo`` (an
``--xla_dump_to`` folder, whose ``*after_optimizations.txt`` modules are matched to the
trace's modules by name, or a ``compiled.as_text()`` file) or, without it, from the profile
itself: xprof's xplane keeps each compiled module as an ``HloProto`` (stat ``Hlo Proto`` on
the ``/host:metadata`` plane, which jax writes by default, ``ProfileOptions.enable_hlo_proto``),
and jaxlib prints it back as HLO text. Example::

    python -m analysis profile /tmp/logdir --mesh X=4,Y=2 --hardware tpu_v5e --topology 4x2

Writes ``collectives.csv``, ``steps.csv``, ``index.html`` and ``report.md`` to ``--out``
(default ``LOGDIR/profile_report``) and prints the top collectives (``--json``: the whole
table as JSON). Bad input: one line ``error: ...`` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from analysis.book.errors import BookError
from analysis.book.units import fmt_bandwidth, fmt_bytes, fmt_duration
from analysis.cli.options import (
    add_constant_arguments,
    fail,
    hardware_from_args,
    parse_mesh,
)

_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.MULTILINE)
_DUMP = re.compile(r"^module_(\d+)\.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``profile`` command's options."""
    parser.add_argument("logdir", help="jax.profiler's log folder, a session folder, or one .xplane.pb")
    parser.add_argument(
        "--hlo",
        default=None,
        help="an --xla_dump_to folder or a compiled.as_text() file (default: the HLO the profile carries)",
    )
    parser.add_argument(
        "--mesh",
        default=None,
        help="the program's mesh, e.g. X=4,Y=2 (logical device ids in mesh "
        "order): names the axes each collective's groups span",
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="predict each collective with the book's model on this "
        "hardware (conf/hardware name or YAML path); cpu needs --link-bw-bidir-Bps and --hop-latency-s",
    )
    parser.add_argument("--topology", default=None, help="physical shape (8x16) or nodes=2,gpus_per_node=8 / slices=2")
    parser.add_argument("--out", default=None, help="output folder (default LOGDIR/profile_report)")
    parser.add_argument("--json", action="store_true", help="print the per-collective table as JSON")
    add_constant_arguments(parser, flops=False)


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


def _fields(buf: memoryview):
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire in (1, 5):
            value, i = None, i + (8 if wire == 1 else 4)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, value


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return out, i


def hlo_from_xplane(path: Path) -> dict[str, str]:
    """``{"jit_step(18)": HLO text}`` for every ``Hlo Proto`` the file's metadata plane holds
    (XSpace.planes=1; XPlane.name=2, event_metadata=4, stat_metadata=5; XEventMetadata.name=2,
    stats=5; XStat.metadata_id=1, bytes_value=6; HloProto.hlo_module=1). The installed
    packages ship no xplane_pb2, so the few fields needed are read off the wire."""
    try:
        from jax._src.lib import (
            xla_client,  # prints an HloModuleProto as text (no public API does)
        )
    except ImportError:
        return {}

    texts: dict[str, str] = {}
    for field, plane in _fields(memoryview(path.read_bytes())):
        if field != 1:
            continue
        parts = list(_fields(plane))
        stat_ids = set()
        for f, entry in parts:
            if f == 5:
                md = dict(_fields(dict(_fields(entry)).get(2, memoryview(b""))))
                if bytes(md.get(2, b"")) == b"Hlo Proto":
                    stat_ids.add(md.get(1, 0))
        if not stat_ids:
            continue
        for f, entry in parts:
            if f != 4:
                continue
            meta = list(_fields(dict(_fields(entry)).get(2, memoryview(b""))))
            name = next((bytes(v).decode() for k, v in meta if k == 2), "")
            for k, stat in meta:
                st = dict(_fields(stat)) if k == 5 else {}
                if st.get(1) in stat_ids and 6 in st:
                    module = dict(_fields(st[6])).get(1)
                    if module is None:
                        continue
                    try:  # a proto this jaxlib cannot read (another XLA's): its text says so
                        texts[name] = xla_client.XlaComputation(bytes(module)).as_hlo_text()
                    except Exception as err:  # noqa: BLE001 - the C++ binding raises bare errors
                        texts[name] = f"// unreadable by this jaxlib: {str(err).splitlines()[0] if str(err) else err!r}"
    return texts


def _by_module(texts: list[tuple[str, str]]) -> dict[str, str]:
    """Module name (its ``HloModule`` header) -> text; of several of one name the last wins
    (the dump's highest module number, the profile's newest program)."""
    out = {}
    for _key, text in texts:
        m = _HEADER.search(text)
        out[m.group(1) if m else ""] = text
    return out


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
        return _by_module([(k, found[k]) for k in sorted(found, key=key)]), "the profile (xplane 'Hlo Proto')"
    path = Path(hlo)
    if path.is_dir():
        files = sorted(
            path.glob("*after_optimizations.txt"), key=lambda p: int(m.group(1)) if (m := _DUMP.match(p.name)) else -1
        )
        if not files:
            raise ValueError(f"{path} holds no *after_optimizations.txt (an --xla_dump_to folder?)")
        return _by_module([(str(p), p.read_text()) for p in files]), f"{path} (--xla_dump_to)"
    text = path.read_text()
    names = _HEADER.findall(text)
    if len(names) <= 1:
        return {names[0] if names else "": text}, str(path)
    chunks = re.split(r"(?m)^(?=\s*HloModule\s)", text)
    return _by_module([("", c) for c in chunks if _HEADER.search(c)]), str(path)


# ---------------------------------------------------------------- the command


def _name_modules(ops, texts: dict[str, str]):
    """Give trace ops without a module name (a backend that records none, or an unnamed HLO
    snippet) the HLO module whose instructions they share most names with."""
    from analysis.hlo import instruction_opcodes

    unnamed = ops["hlo_module"] == ""
    if not unnamed.any() or not texts:
        return ops
    names = set(ops.loc[unnamed, "hlo_op"])
    best = max(texts, key=lambda m: len(names & set(instruction_opcodes(texts[m]))))
    ops.loc[unnamed, "hlo_module"] = best
    return ops


def _predictor(args, hw, mesh):
    """``predict(c, axes)`` for :func:`analysis.profile.hlo_table`: over the mesh axes the
    groups span when ``--mesh`` names them, else the group as one axis (as ``analysis hlo``)."""
    from analysis.book.collective_cost import predict_collective
    from analysis.book.collectives import BY_HLO
    from analysis.book.topology import parse_layout
    from analysis.cli.hlo import predict as predict_group
    from analysis.profile import book_V

    multi = args.topology is not None and parse_layout(args.topology).kind != "shape"

    def predict(c, axes):
        try:
            if axes and not multi and c.kind in BY_HLO:
                p = predict_collective(
                    BY_HLO[c.kind].op,
                    book_V(c.kind, c.operand_bytes, c.result_bytes, c.group_size),
                    [mesh[a] for a in axes],
                    hw,
                )
                return {"model_time_s": p.time_s, "model_note": f"{p.regime}-bound, {p.topology} over {','.join(axes)}"}
            p = predict_group(c, hw, args.topology)
        except BookError as err:
            return {"model_time_s": math.nan, "model_note": f"no model: {err}"}
        if p is None:
            return {"model_time_s": math.nan, "model_note": "no model for this collective"}
        return {"model_time_s": p["model_time_s"], "model_note": f"{p['regime']}-bound, group as one axis"}

    return predict


def _top_lines(table, limit: int = 10) -> list[str]:
    cols = ["name", "kind", "mesh_axes", "V", "runs/step", "median", "p90", "share", "hidden", "busbw", "meas/model"]
    rows = []
    for r in table.head(limit).itertuples():
        share = f"{r.step_share:.1%}" if r.step_share == r.step_share else ""
        hidden = f"{r.hidden_frac:.0%}" if r.hidden_frac == r.hidden_frac else ""
        ratio = f"{r.measured_over_model:.3g}x" if r.measured_over_model == r.measured_over_model else ""
        runs = f"{r.executions_per_step:g}" if r.executions_per_step == r.executions_per_step else "0"
        rows.append(
            [
                r.name,
                r.kind,
                r.mesh_axes,
                fmt_bytes(r.V_bytes),
                runs,
                fmt_duration(r.time_median_s),
                fmt_duration(r.time_p90_s),
                share,
                hidden,
                fmt_bandwidth(r.busbw_Bps),
                ratio,
            ]
        )
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    return [
        "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
        for row in [cols] + rows
    ]


def main(args: argparse.Namespace) -> int:
    """Run ``profile``; 0 on success, 2 on bad input."""
    import pandas as pd

    from analysis import profile as prof
    from analysis.hlo import (
        HloParseError,
        async_pairs,
        instruction_opcodes,
        parse_collectives,
    )
    from analysis.trace import TraceError, device_ops, read_xplane

    logdir = Path(args.logdir)
    try:
        if not logdir.exists():
            raise ValueError(f"{logdir} does not exist")
        if args.topology is not None and args.hardware is None:
            raise BookError("--topology goes with --hardware")
        mesh = parse_mesh(args.mesh) if args.mesh else None
        hw = hardware_from_args(args) if args.hardware else None
        xplanes = find_xplanes(logdir)
        texts, hlo_source = load_hlo(args.hlo, xplanes)
        pairs = {k: v for t in texts.values() for k, v in async_pairs(t).items()}
        parts, on_cpu = [], False
        for path in xplanes:
            events = read_xplane(path)
            on_cpu |= bool(((events["plane"] == "/host:CPU") & events["hlo_op"].notna()).any())
            ops = device_ops(events, pairs)
            if len(parts) and ops["device"].isin(pd.concat(parts)["device"]).any():  # local ordinals per host
                ops["device"] += int(pd.concat(parts)["device"].max()) + 1
            parts.append(ops.assign(host=path.name.removesuffix(".xplane.pb")))
        ops = pd.concat(parts, ignore_index=True)
        if ops.empty:
            raise ValueError(f"{logdir}: the trace holds no device-op events")
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
        if not any(colls.values()):
            raise ValueError(f"the HLO of {', '.join(sorted(matched))} holds no collectives: nothing to profile")
        colls = {m: c for m, c in colls.items() if c}  # a step is an execution of a module with collectives
        matched = {m: matched[m] for m in colls}
        opcodes = {k: v for m in matched.values() for k, v in instruction_opcodes(m).items()}
        predict = _predictor(args, hw, mesh) if hw is not None else None
        hlo_df = prof.hlo_table(colls, mesh, predict)
    except (OSError, ValueError, TraceError, HloParseError, BookError) as err:
        return fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    names = {c.name for cs in colls.values() for c in cs}
    ops = prof.assign_steps(prof.label_ops(ops[ops["hlo_module"].isin(list(matched))], names, opcodes))
    steps = prof.step_table(ops)
    table = prof.collective_table(ops, hlo_df, steps)
    out = Path(args.out) if args.out else (logdir if logdir.is_dir() else logdir.parent) / "profile_report"
    from analysis.report.profile_report import write_profile_report

    info = {
        "logdir": str(logdir),
        "xplanes": [str(p) for p in xplanes],
        "hlo_source": hlo_source,
        "devices": ndev,
        "mesh": args.mesh,
        "hardware": hw.name if hw else None,
        "topology": args.topology,
        "cpu": on_cpu,
    }
    try:
        write_profile_report(out, table, steps, ops, info)
    except OSError as err:
        return fail(f"cannot write {out}: {err.strerror or err}")
    if args.json:
        print(table.to_json(orient="records", indent=1))
        return 0
    summary = prof.step_summary(steps)
    for module, s in summary.groupby("hlo_module"):
        print(
            f"{module}: {len(s)} steps on {ndev} devices, step {fmt_duration(s['step_s'].median())} "
            f"(collectives {fmt_duration(s['collective_s'].median())}, exposed {fmt_duration(s['exposed_s'].median())})"
        )
    print("\n".join(_top_lines(table)))
    for note in sorted({n for n in table["model_note"] if str(n).startswith("no model:")}):
        print(f"note: {note}")
    print(f"HLO from {hlo_source}; wrote {out}/index.html, report.md, collectives.csv, steps.csv")
    return 0
