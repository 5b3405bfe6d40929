"""The sharding notation: parsing, printing, mesh checks and PartitionSpec conversion."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.book.notation import (
    Array,
    Collective,
    Dim,
    Matmul,
    NotationError,
    check,
    format_expr,
    from_partition_spec,
    parse,
    to_partition_spec,
)

AXES = "XYZW"
DIM_NAMES = ["B", "D", "F", "I", "J", "K", "E1", "Seq"]


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("A[I_X, J]", "A[I_X, J]"),
        ("A[I_XY,J]", "A[I_XY, J]"),
        ("A[I_{XY}, J]", "A[I_XY, J]"),
        ("A[I, J]", "A[I, J]"),
        ("[B_X, D_Y]", "[B_X, D_Y]"),
        ("C[I, K]{U_X}", "C[I, K]{U_X}"),
        ("C[I, K]{U_X, U_Y}", "C[I, K]{U_XY}"),
        ("AllGather_X(A[I_X, J])", "AllGather_X(A[I_X, J])"),
        ("allgather_XY [B_X, D_Y]", "AllGather_XY([B_X, D_Y])"),
        ("ReduceScatter_{X,K}(C[I,K]{U_X})", "ReduceScatter_{X,K}(C[I, K]{U_X})"),
        ("AllReduce_Y(A[I_X, J]{U_Y})", "AllReduce_Y(A[I_X, J]{U_Y})"),
        ("AllToAll_{X,J}(A[I_X, J])", "AllToAll_{X,J}(A[I_X, J])"),
        ("AllGather_Y([E_Y, F]) → [E, F]", "AllGather_Y([E_Y, F]) -> [E, F]"),
        ("A[I, J_X] * B[J_X, K] -> C[I, K]", "A[I, J_X] * B[J_X, K] -> C[I, K]"),
        ("A[I, J_X] · B[J_X, K] → C[I, K]", "A[I, J_X] * B[J_X, K] -> C[I, K]"),
        ("X[B, D] ·_D Y[D_X, F]", "X[B, D] *_D Y[D_X, F]"),
    ],
)
def test_parse_and_print(text, canonical):
    expr = parse(text)
    assert str(expr) == canonical
    assert parse(canonical) == expr
    assert parse(format_expr(expr, unicode=True)) == expr


def test_structure():
    c = parse("ReduceScatter_{X,K}(C[I, K]{U_X})")
    assert isinstance(c, Collective) and (c.kind, c.axes, c.dim) == ("ReduceScatter", ("X",), "K")
    assert str(c.result()) == "C[I, K_X]"
    assert str(parse("AllToAll_{X,J}(A[I_X, J])").result()) == "A[I, J_X]"
    assert str(parse("AllGather_X(A[I_XY, J])").result()) == "A[I_Y, J]"
    m = parse("A[I, J_X] * B[J_X, K] -> C[I, K]")
    assert isinstance(m, Matmul) and m.contracting == ("J",)
    assert parse("A[I_XY, J]") == Array((Dim("I", ("X", "Y")), Dim("J")), "A")


@pytest.mark.parametrize(
    "text, quoted",
    [
        ("A[I_X, J_X]", "mesh axis X is used twice"),  # an axis shards two dims
        ("A[I_XX]", "repeats"),
        ("A[I, I]", "dim I appears twice"),
        ("A[I_X, J]{U_X}", "both shards I and is unreduced"),
        ("AllGather_Y(A[I_X, J])", "A[I_X, J] is not sharded over Y"),
        ("AllReduce_X(C[I, K])", "C[I, K] is not unreduced over X"),
        ("ReduceScatter_X(C[I, K]{U_X})", "name the dim"),
        ("AllToAll_{X,I}(A[I_X, J])", "already sharded"),
        ("AllGather_X(A[I_X, J]) -> A[I_X, J]", "not A[I_X, J]"),
        ("A[I_x]", "'x'"),
        ("A[I_X", "column 6"),
        ("A[I]]", "']'"),
        ("A[I, J] * B[J, K] -> C[I]", "output's dims"),
        ("A[I, J]{U_X} * B[J, K]{U_X}", "both inputs are unreduced"),
        ("A[I_X, J] * B[J, K] -> C[I_X, K_X]", "uses mesh axis X twice"),
        ("", "empty"),
        ("A[I] $", "'$'"),
    ],
)
def test_errors_quote_the_offending_part(text, quoted):
    with pytest.raises(NotationError) as err:
        parse(text)
    assert quoted in str(err.value)
    assert isinstance(err.value, ValueError)


def test_case4_output_parses():
    # The book's invalid sharding is a matmul the cost model explains, not a parse error.
    m = parse("A[I_X, J] * B[J, K_X] -> C[I_X, K_X]")
    assert str(m.out) == "C[I_X, K_X]"


def test_mesh_checks():
    mesh = {"X": 4, "Y": 2}
    check(parse("A[I_XY, J]"), mesh, {"I": 8, "J": 3})
    with pytest.raises(NotationError, match="mesh axis Z is not in the mesh"):
        check(parse("A[I_Z, J]"), mesh)
    with pytest.raises(NotationError, match="I=6 is not divisible by its 8 shards"):
        check(parse("A[I_XY, J]"), mesh, {"I": 6, "J": 3})
    with pytest.raises(NotationError, match="K=6 is not divisible"):  # the result's sharding too
        check(parse("ReduceScatter_{X,K}(C[I, K]{U_X})"), mesh, {"I": 4, "K": 6})
    with pytest.raises(NotationError, match="dim J has no size"):
        check(parse("A[I_X, J]"), mesh, {"I": 8})


def test_partition_spec_round_trip():
    from jax.sharding import PartitionSpec as P

    mesh = {"X": 4, "Y": 2}
    assert to_partition_spec("A[I_XY, J]", mesh) == P(("X", "Y"), None)
    assert to_partition_spec("A[I_X, J_Y]") == P("X", "Y")
    assert to_partition_spec("A[I, J]") == P(None, None)
    assert from_partition_spec(P(("X", "Y"), None), ["I", "J"], "A", mesh) == parse("A[I_XY, J]")
    assert from_partition_spec(P("X"), ["I", "J"], "A") == parse("A[I_X, J]")  # short spec
    spec = to_partition_spec("C[I, K_Y]{U_X}")
    assert spec.unreduced == frozenset({"X"})
    assert from_partition_spec(spec, ["I", "K"], "C") == parse("C[I, K_Y]{U_X}")
    with pytest.raises(NotationError, match="'data'"):
        from_partition_spec(P("data", None), ["I", "J"])
    with pytest.raises(NotationError, match="not in the mesh"):
        to_partition_spec("A[I_Z, J]", mesh)


def test_notation_does_not_import_jax():
    code = "import sys, analysis.book.notation; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- property tests
@st.composite
def arrays(draw, dim_names=None, allow_unreduced=True):
    names = dim_names or draw(st.lists(st.sampled_from(DIM_NAMES), min_size=1, max_size=3, unique=True))
    # Each axis goes to one dim, to the unreduced set, or nowhere; so no axis repeats.
    where = draw(
        st.lists(st.integers(-2 if allow_unreduced else -1, len(names) - 1), min_size=len(AXES), max_size=len(AXES))
    )
    order = draw(st.permutations(AXES))
    dims = tuple(Dim(n, tuple(a for a in order if where[AXES.index(a)] == i)) for i, n in enumerate(names))
    unreduced = tuple(a for a in order if where[AXES.index(a)] == -2)
    return Array(dims, draw(st.sampled_from([None, "A", "C", "W1"])), unreduced)


@st.composite
def collectives(draw):
    arr = draw(arrays())
    kinds = [
        k
        for k, ok in (
            ("AllGather", arr.axes),
            ("AllToAll", arr.axes),
            ("AllReduce", arr.unreduced),
            ("ReduceScatter", arr.unreduced),
        )
        if ok
    ]
    if not kinds:
        return arr
    kind = draw(st.sampled_from(kinds))
    dim = draw(st.sampled_from([d.name for d in arr.dims])) if kind in ("AllToAll", "ReduceScatter") else None
    pool = (
        arr.unreduced
        if kind in ("AllReduce", "ReduceScatter")
        else tuple(a for a in arr.axes if kind == "AllGather" or arr.dim_of(a) != dim)
    )
    if not pool:
        return arr
    axes = tuple(draw(st.lists(st.sampled_from(pool), min_size=1, unique=True)))
    return Collective(kind, axes, arr, dim)


@st.composite
def matmuls(draw):
    lhs, rhs = draw(arrays(["I", "J"])), draw(arrays(["J", "K"], allow_unreduced=False))
    out = draw(st.one_of(st.none(), arrays(["I", "K"], allow_unreduced=False)))
    return Matmul(lhs, rhs, out)


@settings(max_examples=150, deadline=None)
@given(st.one_of(arrays(), collectives(), matmuls()))
def test_print_parse_round_trip(expr):
    text = str(expr)
    assert parse(text) == expr
    assert str(parse(text)) == text
    assert parse(format_expr(expr, unicode=True)) == expr


NOTATION_CHARS = "AIJKXYZU_[]{}(),*·→->  " + "AllGatherReduceScatterToAll"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(alphabet=NOTATION_CHARS, max_size=40)))
def test_random_strings_raise_only_notation_error(text):
    try:
        expr = parse(text)
    except NotationError:
        return
    assert parse(str(expr)) == expr
