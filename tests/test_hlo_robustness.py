"""The HLO parser on random and mutated text: only HloParseError, never another exception,
and no pathological slowness."""

from __future__ import annotations

import pytest
from hlo_samples import COMMENTS_AND_LOOPS, CPU_REDUCE_SCATTER, GPU_ASYNC, MULTILINE, NEW_STYLE, OLD_STYLE, TPU_MODULE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.hlo import (
    KINDS,
    HloParseError,
    collective_executions,
    expand_iota_groups,
    parse_collectives,
    shape_bytes,
)

VALID = "\n".join([CPU_REDUCE_SCATTER, OLD_STYLE, NEW_STYLE, TPU_MODULE, GPU_ASYNC, MULTILINE, COMMENTS_AND_LOOPS])
HLO_BITS = [
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    "%",
    '"',
    "\\",
    "/*",
    "*/",
    "\n",
    " ",
    "ROOT ",
    "ENTRY ",
    "f32[8]{0}",
    "all-gather(",
    "-start",
    "-done",
    "replica_groups=",
    "{{0,1}}",
    "[2,2]<=[4]",
    "T(1,0)",
    "<=",
    "mesh[a=2]",
    "async-start(",
    "calls=",
    "HloModule x",
    "s4[",
    "?",
    "9" * 40,
]


def _only_parse_errors(fn, *args) -> None:
    try:
        fn(*args)
    except HloParseError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(HLO_BITS), st.characters()), max_size=120).map("".join))
def test_random_text_raises_only_hlo_parse_error(text):
    for fn in (parse_collectives, collective_executions, shape_bytes, expand_iota_groups):
        _only_parse_errors(fn, text)


@st.composite
def mutated_module(draw):
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 40)))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(HLO_BITS)) + text[i:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.text(max_size=5)) + text[j:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_module())
def test_mutated_modules_raise_only_hlo_parse_error(text):
    try:
        found = parse_collectives(text)
    except HloParseError:
        found = []
    assert all(c.kind in KINDS and c.operand_bytes >= 0 and c.result_bytes >= 0 for c in found)
    try:  # what runs the collectives: every name maps to collective kinds, never anything else
        runs = collective_executions(text)
    except HloParseError:
        runs = {}
    assert all(kinds and set(kinds) <= set(KINDS) for kinds in runs.values())


def test_valid_corpus_parses_and_scales():
    assert len(parse_collectives(VALID)) == 1 + 2 + 2 + 3 + 5 + 1 + 2
    # A big dump (thousands of instructions, about 15k lines) finds every collective; its
    # parse rate is a figure of tests/bench/run.py, not a pass/fail here.
    assert len(parse_collectives(VALID * 60)) == 16 * 60


def test_a_long_string_or_comment_costs_memory_in_proportion_to_the_text():
    """A 2 MB op_name and a 1 MB comment on one line: the string and comment regexes keep no
    backtracking state per character (the old ones peaked at 62 x the text here, 2.7 GB for a
    20 MB literal); the peak allocation stays within 8 x the text."""
    import tracemalloc

    lit = "a," * 1_000_000
    meta = f'metadata={{op_name="{lit}"}}'
    text = (
        f"HloModule m\n\nENTRY %e {{\n  %a = f32[8]{{0}} parameter(0), {meta} /* {'b' * 1_000_000} */\n"
        f"  ROOT %g = f32[16]{{0}} all-gather(%a), replica_groups={{{{0,1}}}}, dimensions={{0}}, {meta}\n}}\n"
    )
    tracemalloc.start()
    try:
        found = parse_collectives(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(c.kind, c.result_bytes, c.op_name == lit) for c in found] == [("all-gather", 64, True)]
    assert peak < 8 * len(text)


def test_a_shape_too_large_for_any_buffer_is_a_parse_error_not_an_overflow():
    assert shape_bytes("f32[99999999999,40]") == 99999999999 * 40 * 4  # large but countable: exact
    assert shape_bytes("s4[3]") == 2  # 12 bits round up to whole bytes
    huge = "f32[" + ",".join(["9" * 30] * 12) + "]"  # 10^360 elements: a float division overflowed
    with pytest.raises(HloParseError, match=r"more than 2\*\*60 elements"):
        shape_bytes(huge)
    with pytest.raises(HloParseError, match=r"more than 2\*\*60 elements"):
        shape_bytes("u8[1152921504606846977]")  # 2**60 + 1
