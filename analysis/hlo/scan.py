"""The line scanner under :mod:`analysis.hlo`: HLO text in, per module the instructions a
collective needs out.

No library parses HLO text from Python, so this is a small, forgiving scanner rather than a
full grammar. It follows modules (``HloModule`` lines), computations (their headers, with
parameter shapes) and instructions (possibly spread over several lines), records every
instruction's shape by name, and keeps the collective and async instructions whole; text
outside computations (headers, ``FileNames``/``StackFrames`` sections, logs) is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analysis.book.collectives import HLO_OPCODES
from analysis.hlo.lex import HloParseError, balance, blank_strings, close_bracket, parse_int, split_top, strip_comments
from analysis.hlo.shapes import shape_end

__all__ = ["KINDS", "Instr", "Module", "scan", "truncation", "instruction_opcodes", "async_pairs"]

KINDS = HLO_OPCODES  # every collective opcode, from the book's table of collectives

_NAME = r"[A-Za-z_][\w.\-]*"
_INSTR_HEAD_RE = re.compile(rf"\s*(?:ROOT\s+)?%?({_NAME})\s*=\s*")
# A line that starts a new instruction (not an attribute continuation like `calls=%c`).
_INSTR_START_RE = re.compile(rf"\s*(?:ROOT\s+)?%?{_NAME}\s*=\s*(?:\(|[a-z][a-z0-9]*\[|[a-z][\w\-]*\()")
_COMP_HEAD_RE = re.compile(rf"\s*(?:ENTRY\s+)?%?({_NAME})\s*")
_OPCODE_RE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_ANY_COLLECTIVE_RE = re.compile(r"(?<![\w.%\-])(?:" + "|".join(re.escape(k) for k in KINDS) + r")(?:-start)?\(")


@dataclass
class Instr:
    """A collective or async instruction: operands and attributes kept as raw text."""

    name: str
    comp: str
    opcode: str
    shape: str | None
    operands: str
    attrs: str


@dataclass
class Module:
    """What the scanner keeps of one HLO module."""

    num_devices: int | None = None  # from the header, for `replica_groups={}`
    defs: dict = field(default_factory=dict)  # (comp, name) -> shape text or None
    global_defs: dict = field(default_factory=dict)  # name -> shape (names are module-unique)
    params: dict = field(default_factory=dict)  # comp -> {param: shape}, from its header
    instrs: list = field(default_factory=list)  # collective/async Instr, in text order
    opcodes: dict = field(default_factory=dict)  # instruction name -> opcode, every instruction
    started_by: dict = field(default_factory=dict)  # an async *-done's name -> its *-start's name
    entry: str | None = None  # the ENTRY computation (else the last one printed, as XLA prints it last)
    comps: list = field(default_factory=list)  # computation names in text order
    comp_of: dict = field(default_factory=dict)  # instruction name -> its computation
    called: dict = field(default_factory=dict)  # instruction name -> ((attribute, computation), ...)
    name: str | None = None  # from its `HloModule NAME, ...` line; None: a bare snippet without one
    cut_in: str | None = None  # the computation the text ended inside ("": an instruction outside one)


# Attributes that name a computation an instruction runs: fusions and async wrappers (calls),
# call/call-start and reducers (to_apply), while loops, conditionals.
_CALLED_RE = re.compile(
    r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%?([A-Za-z_][\w.\-]*)"
    r"|\b(branch_computations)=\{([^{}]*)\}"
)

# Opcodes whose called computations decide what runs (async starts too, by their suffix).
_CALLERS = {"fusion", "while", "conditional", "call"}

_RELEVANT = {k + suffix for k in KINDS for suffix in ("", "-start", "-done")} | {"async-start", "async-done"}


def _header_devices(line: str) -> int | None:
    found = {k: parse_int(v, k) for k, v in re.findall(r"\b(num_partitions|replica_count)=([0-9]+)", line)}
    if not found:
        return None
    return found.get("num_partitions", 1) * found.get("replica_count", 1)


def _called(stmt: str) -> tuple:
    """The computations ``stmt`` names as called (``calls=%c``, ``body=%b``, ...), strings left out."""
    # plain substring tests first: 6x faster than the regex on a line that calls nothing
    if not (
        "calls=" in stmt or "to_apply=" in stmt or "body=" in stmt or "condition=" in stmt or "_computation" in stmt
    ):
        return ()
    out = []
    for m in _CALLED_RE.finditer(blank_strings(stmt) if '"' in stmt else stmt):
        if m.group(1):
            out.append((m.group(1), m.group(2)))
        else:
            out += [(m.group(3), c.strip().lstrip("%")) for c in m.group(4).split(",") if c.strip()]
    return tuple(out)


def _comp_header(line: str) -> tuple[str, dict] | None:
    """(name, {param: shape}) when ``line`` opens a computation body, else None."""
    st = line.strip()
    if not st.endswith("{") or balance(st) != 1:
        return None
    m = _COMP_HEAD_RE.match(st)
    if not m or m.group(1) == "HloModule":
        return None
    rest, params = st[m.end() :], {}
    if rest.startswith("("):
        try:
            end = close_bracket(rest, 0)
            for p in split_top(rest[1 : end - 1]):
                pname, _, pshape = p.partition(":")
                params[pname.strip().lstrip("%")] = pshape.strip()
        except HloParseError:
            return None
        rest = rest[end:].strip()
        if rest.startswith("->"):
            rest = rest[2:].strip()
            try:
                rest = rest[shape_end(rest, 0) :].strip()
            except HloParseError:
                return None
    return (m.group(1), params) if rest == "{" else None


def _parse_instr(stmt: str, comp: str, mod: Module) -> None:
    """Record one instruction statement; lines that are not instructions are skipped,
    unless they mention a collective, which must not be silently lost."""
    try:
        m = _INSTR_HEAD_RE.match(stmt)
        if not m:
            raise HloParseError(f"not an instruction: {stmt[:80]!r}")
        name, i = m.group(1), m.end()
        shape = None
        if not _OPCODE_RE.match(stmt, i):  # shape-less instructions exist in hand-written HLO
            j = shape_end(stmt, i)
            shape, i = stmt[i:j], j
        om = _OPCODE_RE.match(stmt, i)
        if not om:
            raise HloParseError(f"no opcode in {stmt[:80]!r}")
        opcode = om.group(1)
        mod.opcodes[name] = opcode
        mod.comp_of[name] = comp
        if opcode in _CALLERS or opcode.endswith("-start"):  # reducers' to_apply is never needed
            called = _called(stmt)
            if called:
                mod.called[name] = called
        # all-gather-done, async-done, call-done, ...: its operand is the start (or an update of it)
        if opcode.endswith(("-done", "-update")):
            first = split_top(stmt[om.end() : close_bracket(stmt, om.end() - 1) - 1])
            if first and first[0].split():
                mod.started_by[name] = first[0].split()[-1].lstrip("%")
        mod.defs[(comp, name)] = shape
        mod.global_defs.setdefault(name, shape)
        if opcode in _RELEVANT:
            j = close_bracket(stmt, om.end() - 1)
            mod.instrs.append(Instr(name, comp, opcode, shape, stmt[om.end() : j - 1], stmt[j:]))
    except HloParseError:
        if _ANY_COLLECTIVE_RE.search(stmt):
            raise


def scan(text: str) -> list[Module]:
    """One :class:`Module` per ``HloModule`` in ``text`` (at least one, for bare snippets).

    Instruction lines found outside any computation are kept, in computation ``""``.
    """
    text = strip_comments(text)
    mods = [Module()]
    comp: str | None = None  # the computation whose body we are in
    pending: list[str] = []  # lines of an instruction that spans several lines
    pending_bal = 0
    lines = text.split("\n")
    k = 0
    while k < len(lines):
        line = lines[k]
        bal = balance(line)
        if pending:
            # A new instruction, a new module, or a closing brace we did not open ends the
            # multi-line statement: flush it and look at this line afresh.
            if pending_bal + bal < 0 or _INSTR_START_RE.match(line) or line.lstrip().startswith("HloModule"):
                _parse_instr(" ".join(pending), comp or "", mods[-1])
                pending, pending_bal = [], 0
                continue
            pending.append(line)
            pending_bal += bal
            if pending_bal == 0 and not line.rstrip().endswith(","):
                _parse_instr(" ".join(pending), comp or "", mods[-1])
                pending = []
            k += 1
            continue
        k += 1
        st = line.strip()
        if not st:
            continue
        if st.startswith("HloModule"):
            if comp is not None:  # the module before ends inside a computation: cut short
                mods[-1].cut_in = comp
            if mods[-1].instrs or mods[-1].defs or mods[-1].num_devices is not None or mods[-1].name:
                mods.append(Module())
            mods[-1].num_devices = _header_devices(st)
            mods[-1].name = st.removeprefix("HloModule").split(",", 1)[0].strip() or "?"
            comp = None
            continue
        if comp is None:
            head = _comp_header(st)
            if head is not None:
                comp = head[0]
                mods[-1].params[comp] = head[1]
                mods[-1].comps.append(comp)
                if st.startswith("ENTRY"):
                    mods[-1].entry = comp
            elif bal == 0 and _INSTR_START_RE.match(st):
                _parse_instr(st, "", mods[-1])  # a bare snippet of instructions
            elif _ANY_COLLECTIVE_RE.search(st) and _INSTR_START_RE.match(st):
                raise HloParseError(f"unbalanced collective instruction: {st[:80]!r}")
            continue
        if st.startswith("}") and bal < 0:
            comp = None  # `}` or `}, execution_thread="..."`
        elif bal == 0 and not st.endswith(","):
            _parse_instr(st, comp, mods[-1])
        else:
            pending, pending_bal = [line], bal
    if comp is not None or pending:  # the text ends before what it opened closes: cut short
        mods[-1].cut_in = comp or ""
    if pending:
        try:
            _parse_instr(" ".join(pending), comp or "", mods[-1])
        except HloParseError:  # a collective cut in half: say so, not which bracket is missing
            raise HloParseError(truncation(mods[-1])) from None
    for mod in mods:
        _resolve_updates(mod)
    return mods


def truncation(mod: Module) -> str | None:
    """Why ``mod`` is not a whole module, as one phrase, or None: text that ends inside a
    computation or an instruction, or a module header with no ENTRY computation after it (XLA
    prints every module's ENTRY, last). A cut file otherwise reads as one without collectives."""
    what = f"module {mod.name}" if mod.name else "the text"
    if mod.cut_in is not None:
        inside = f"computation {mod.cut_in}" if mod.cut_in else "an instruction"
        return f"{what} ends inside {inside}: cut short"
    if mod.name and mod.entry is None:
        return f"{what} has no ENTRY computation: cut short, or not a whole module"
    return None


def _resolve_updates(mod: Module) -> None:
    """``started_by`` names each done's start: a chain ``start -> *-update -> done`` is
    followed back to the start, and the updates themselves are left out."""
    for name in list(mod.started_by):
        if mod.opcodes.get(name, "").endswith("-update"):
            continue
        seen, start = {name}, mod.started_by[name]
        while mod.opcodes.get(start, "").endswith("-update") and start in mod.started_by and start not in seen:
            seen.add(start)
            start = mod.started_by[start]
        mod.started_by[name] = start
    for name in [n for n in mod.started_by if mod.opcodes.get(n, "").endswith("-update")]:
        del mod.started_by[name]


def instruction_opcodes(text: str) -> dict[str, str]:
    """Every instruction's opcode by name (``{"psum.7": "all-reduce", "fusion.2": "fusion"}``):
    what tells a collective from compute, whatever JAX named the instruction."""
    out: dict[str, str] = {}
    for mod in scan(text):
        out.update(mod.opcodes)
    return out


def async_pairs(text: str) -> dict[str, str]:
    """Every asynchronous op's ``done -> start`` instruction names (``all-gather-done.2`` ->
    ``all-gather-start.1``; offloaded collectives end in ``async-done`` or ``call-done``): what
    joins the two halves of one collective in a trace."""
    out: dict[str, str] = {}
    for mod in scan(text):
        out.update(mod.started_by)
    return out
