"""The last token's row of a per-token activation: a view, no arithmetic, no contract.

A decoder's prefill that is asked for the last position's logits only (what generation needs
after a prompt) passes the values its circuit's output_rows names through this op, right after
that node, so every op after it runs on one row.  That is where llama.cpp's graph keeps the
rows a call returns; the ops after it then have a one-row call's arithmetic (a GEMV, not a
GEMM row), which is why the point is the circuit's to state and not the epilogue's.
"""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import tensor_of
from v8dialect.ir.graph_op import shape
from v8dialect.ir.narrowing import tensor_type
from v8dialect.ops.kind import OpKind


@irdl_op_definition
class LastTokenOp(IRDLOperation):
    """Row T-1 of a [T, ...] activation as a [1, ...] one (with a run-time token count, row
    n_tokens-1)."""

    name = "v8.last_token"

    input = operand_def(TensorType)
    result = result_def(TensorType)

    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, source: SSAValue) -> None:
        src = tensor_type(source.type)
        assert src is not None
        dims = shape(src)
        super().__init__(operands=[source],
                         result_types=[tensor_of((1, *dims[1:]), src.get_element_type())])

    def verify_(self) -> None:
        src, dst = tensor_type(self.input.type), tensor_type(self.result.type)
        assert src is not None and dst is not None
        if src.get_element_type() != dst.get_element_type():
            raise VerifyException("last_token keeps the element type")
        dims, out = shape(src), shape(dst)
        if len(dims) < 2:
            raise VerifyException(f"last_token reads a [tokens, ...] activation, got {src}")
        if out != (1, *dims[1:]):
            raise VerifyException(f"last_token of {src} is one row of it, "
                                  f"{tensor_of((1, *dims[1:]), src.get_element_type())}, not {dst}")


KINDS = (
    OpKind("last_token", (LastTokenOp,), arity=1, contract=False),
)
