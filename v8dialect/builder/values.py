"""The builder's vocabulary of values: located build errors, element and tensor types, limits."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, TensorType, i32
from xdsl.ir import Attribute, SSAValue

from v8dialect.ir.graph_op import shape as tensor_shape
from v8dialect.ir.types import (
    Q4KType,
    Q5KType,
    Q6KType,
    Q40Type,
    Q41Type,
    Q50Type,
    Q51Type,
    Q80Type,
)

DEFAULT_PREFILL_TOKENS = 16
MAX_LAYERS = 512  # the most layers llama.cpp loads: no model file it runs has more
MAX_POSITIONS = 2**31 - 1
DEFAULT_KV_CAPACITY = 4096
DECODE_TOKENS = 1
CONFIG_WEIGHT_TYPE = "f32"  # a config JSON has no tensors: weights are taken as fp32

# Metadata that changes the arithmetic in ways no circuit op expresses yet; a
# model stating it must not build silently without it.
UNEXPRESSED_METADATA = ("rope.scaling.type", "attn_logit_softcapping", "final_logit_softcapping")

TensorType_ = TensorType[Attribute]


class BuildError(Exception):
    """A located build failure: `where` is file:line:col (circuit) or a file name (model)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: error: {message}")


# ---- types ---------------------------------------------------------------------------


def element_type(dtype: str) -> Attribute | None:
    return {
        "f32": Float32Type(),
        "f16": Float16Type(),
        "bf16": BFloat16Type(),
        "q4_k": Q4KType(),
        "q5_k": Q5KType(),
        "q6_k": Q6KType(),
        "q8_0": Q80Type(),
        "q5_0": Q50Type(),
        "q4_0": Q40Type(),
        "q4_1": Q41Type(),
        "q5_1": Q51Type(),
        "i32": i32,
    }.get(dtype)


def tensor_of(dims: Sequence[int], element: Attribute) -> TensorType_:
    return TensorType(element, list(dims))


def dims_of(value: SSAValue) -> tuple[int, ...]:
    return tensor_shape(value.type)


