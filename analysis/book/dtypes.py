"""Element types: their canonical names, aliases and sizes in bytes."""

from __future__ import annotations

from analysis.book.errors import NotationError

DTYPE_BYTES: dict[str, float] = {
    "float64": 8,
    "float32": 4,
    "int32": 4,
    "bfloat16": 2,
    "float16": 2,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int4": 0.5,
}
# The dtypes the runner measures (its inputs and checks support them).
RUN_DTYPES = ("float32", "bfloat16", "float16", "int32", "int8")
# The precisions a matmul may run at (``jax.lax.Precision``'s names): on float32 inputs,
# default is one bfloat16 pass on TPU and TF32 on NVIDIA GPUs, high three bfloat16 passes on
# TPU (TF32 on GPU), highest float32 arithmetic (six bfloat16 passes on TPU); a CPU computes
# float32 at all three. 16-bit inputs run one pass at every precision.
PRECISIONS = ("default", "high", "highest")
ALIASES = {
    "bf16": "bfloat16",
    "f32": "float32",
    "fp32": "float32",
    "f16": "float16",
    "fp16": "float16",
    "f64": "float64",
    "fp8": "float8_e4m3fn",
    "s8": "int8",
    "i8": "int8",
}


def dtype_bytes(dtype: str) -> tuple[str, float]:
    """Canonical dtype name and its bytes per element (``"bf16"`` -> ``("bfloat16", 2)``)."""
    name = ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if name not in DTYPE_BYTES:
        raise NotationError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPE_BYTES)})")
    return name, DTYPE_BYTES[name]


def itemsize(dtype: str) -> int:
    """Whole bytes per element of a dtype the runner measures."""
    return int(dtype_bytes(dtype)[1])


# nccl-tests' type names (``test_typenames`` in its src/common.cu) -> shardlab's dtypes: what
# the importers read and the nccl-tests export writes (uint32, int64 and uint64 are read only)
NCCL_TESTS_TYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}
