"""lower-to-kernels: resolved GraphIR on tensors -> LoweredIR kernel invocations on buffers.

Function arguments become memrefs, each contract-bearing op becomes a
``v8.alloc`` for its result plus one ``v8.kernel`` that keeps the op's node,
phase, scalar parameters and pinned resolution; reshapes become views, a last
token's row a ``v8.last_row`` of its buffer, and a call
of a layer function a ``v8.invoke`` that writes a buffer per result.  One
rewrite pattern per op class, applied by xDSL's pattern walker.  The
pass checks every op against the resolution ledger before and after.
"""

from __future__ import annotations

from dataclasses import dataclass

from v8passes.v8_pass import V8Pass
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import Rewriter

from v8dialect.diagnostics import V8Error, op_error
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.lowered import AllocOp, InvokeOp, KernelOp, LastRowOp, ViewOp
from v8dialect.ir.narrowing import ssa_value, tensor_type
from v8dialect.ops.last_token import LastTokenOp
from v8dialect.ops.reshape import ReshapeOp

# Properties of GraphIR ops that are not scalar parameters of the kernel.
NOT_PARAMS = frozenset({"node", "phase", "contract", "execution", "requirement", "resolved"})


def buffer_type(value_type: Attribute) -> MemRefType[Attribute]:
    tensor = tensor_type(value_type)
    assert tensor is not None
    return MemRefType(tensor.get_element_type(), tensor.get_shape())


def operand_roles(op: GraphOp) -> list[tuple[str, SSAValue]]:
    """The op's operands by their definition names (q, k, v / x, w, bias / ...)."""
    roles: list[tuple[str, SSAValue]] = []
    for name, _ in type(op).get_irdl_definition().operands:
        value = ssa_value(getattr(op, name))
        if value is not None:
            roles.append((name, value))
    return roles


def kernel_params(op: GraphOp) -> DictionaryAttr:
    return DictionaryAttr({k: v for k, v in op.properties.items() if k not in NOT_PARAMS})


class LowerGraphOp(RewritePattern):
    """A contract-bearing op -> a buffer for its result (unless it updates an operand in place)
    and one v8.kernel that keeps its node, phase, scalar parameters and pinned resolution."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: GraphOp, rewriter: PatternRewriter) -> None:
        if op.resolved is None:
            raise V8Error([op_error(op, "lower-to-kernels: op is not resolved; run resolve-contracts first")])
        (result,) = op.results
        roles = operand_roles(op)
        new_ops: list[Operation] = []
        if op.IN_PLACE is not None:
            # the op updates that operand's buffer; its result is the same buffer
            target = dict(roles)[op.IN_PLACE]
        else:
            out = AllocOp(buffer_type(result.type))
            new_ops.append(out)
            target = out.result
        kernel = KernelOp.create(
            operands=[v for _, v in roles] + [target],
            properties={
                "kind": StringAttr(op.name.removeprefix("v8.")),
                "node": op.node,
                "phase": op.phase,
                "roles": ArrayAttr([StringAttr(r) for r, _ in roles] + [StringAttr("out")]),
                "params": kernel_params(op),
                "resolved": op.resolved,
            },
        )
        new_ops.append(kernel)
        for new in new_ops:
            new.location = op.location
        rewriter.replace(op, new_ops, [target])


class LowerReshape(RewritePattern):
    """A reshape -> a view of the same buffer."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReshapeOp, rewriter: PatternRewriter) -> None:
        view = ViewOp(op.input, buffer_type(op.result.type))
        view.location = op.location
        rewriter.replace(op, view, [view.result])


class LowerLastToken(RewritePattern):
    """The last token's row -> that row of the same buffer."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LastTokenOp, rewriter: PatternRewriter) -> None:
        row = LastRowOp(op.input, buffer_type(op.result.type))
        row.location = op.location
        rewriter.replace(op, row, [row.result])


class LowerLayerCall(RewritePattern):
    """A call of a layer function -> a buffer per result and a v8.invoke that writes them."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.CallOp, rewriter: PatternRewriter) -> None:
        outs = [AllocOp(buffer_type(r.type)) for r in op.results]
        invoke = InvokeOp(op.callee.string_value(), [*op.arguments, *(o.result for o in outs)], len(outs))
        for new in (*outs, invoke):
            new.location = op.location
        rewriter.replace(op, [*outs, invoke], [o.result for o in outs])


def buffer_signature(fn: func.FuncOp) -> None:
    """Tensor arguments and results become buffers of the same shape and element type."""
    for arg in list(fn.body.block.args):
        if tensor_type(arg.type) is not None:
            Rewriter.replace_value_with_new_type(arg, buffer_type(arg.type))
    inputs = [a.type for a in fn.body.block.args]
    outputs = [buffer_type(t) if tensor_type(t) is not None else t for t in fn.function_type.outputs]
    fn.function_type = FunctionType.from_lists(inputs, outputs)


def refuse_unlowerable(fn: func.FuncOp) -> None:
    """Before anything changes: every op of a phase is a GraphIR op, a view or the return."""
    for op in fn.body.block.ops:
        if not isinstance(op, GraphOp | ReshapeOp | LastTokenOp | func.ReturnOp | func.CallOp):
            raise V8Error([op_error(op, f"lower-to-kernels: no lowering for '{op.name}'")])


@dataclass(frozen=True)
class LowerToKernels(V8Pass):
    """Turn resolved GraphIR ops into kernel invocations on buffers, pinned to the ledger."""

    name = "lower-to-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        functions = [f for f in op.walk() if isinstance(f, func.FuncOp)]
        for fn in functions:
            refuse_unlowerable(fn)
            buffer_signature(fn)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LowerGraphOp(), LowerReshape(), LowerLastToken(),
                                         LowerLayerCall()]),
            apply_recursively=False,
        ).rewrite_module(op)
