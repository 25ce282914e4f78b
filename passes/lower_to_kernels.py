"""lower-to-kernels: resolved GraphIR on tensors -> LoweredIR kernel invocations on buffers.

Function arguments become memrefs, each contract-bearing op becomes a
``v8.alloc`` for its result plus one ``v8.kernel`` that keeps the op's node,
phase, scalar parameters and pinned resolution; reshapes become views.  The
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
from xdsl.ir import Attribute, Block, Operation, SSAValue

from v8dialect.diagnostics import V8Error, op_error
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.lowered import AllocOp, KernelOp, ViewOp
from v8dialect.ir.narrowing import ssa_value, tensor_type
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


@dataclass
class FunctionLowering:
    values: dict[SSAValue, SSAValue]
    block: Block

    def lower(self, op: Operation) -> None:
        match op:
            case GraphOp():
                self.lower_graph_op(op)
            case ReshapeOp():
                view = ViewOp(self.values[op.input], buffer_type(op.result.type))
                self.emit(view, op)
                self.values[op.result] = view.result
            case func.ReturnOp():
                self.block.add_op(func.ReturnOp(*(self.values[v] for v in op.arguments)))
            case _:
                raise V8Error([op_error(op, f"lower-to-kernels: no lowering for '{op.name}'")])

    def lower_graph_op(self, op: GraphOp) -> None:
        if op.resolved is None:
            raise V8Error([op_error(op, "lower-to-kernels: op is not resolved; run resolve-contracts first")])
        (result,) = op.results
        roles = operand_roles(op)
        if op.IN_PLACE is not None:
            # the op updates that operand's buffer; its result is the same buffer
            target = self.values[dict(roles)[op.IN_PLACE]]
        else:
            out = AllocOp(buffer_type(result.type))
            self.emit(out, op)
            target = out.result
        kernel = KernelOp.create(
            operands=[self.values[v] for _, v in roles] + [target],
            properties={
                "kind": StringAttr(op.name.removeprefix("v8.")),
                "node": op.node,
                "phase": op.phase,
                "roles": ArrayAttr([StringAttr(r) for r, _ in roles] + [StringAttr("out")]),
                "params": kernel_params(op),
                "resolved": op.resolved,
            },
        )
        self.emit(kernel, op)
        self.values[result] = target

    def emit(self, new: Operation, origin: Operation) -> None:
        new.location = origin.location
        self.block.add_op(new)


def lower_function(fn: func.FuncOp) -> None:
    old_block = fn.body.block
    arg_types = [buffer_type(a.type) if tensor_type(a.type) is not None else a.type for a in old_block.args]
    block = Block(arg_types=arg_types)
    for new, old in zip(block.args, old_block.args, strict=True):
        new.name_hint = old.name_hint
    values: dict[SSAValue, SSAValue] = dict(zip(old_block.args, block.args, strict=True))
    lowering = FunctionLowering(values, block)
    for op in list(old_block.ops):
        lowering.lower(op)
    results = [buffer_type(t) if tensor_type(t) is not None else t for t in fn.function_type.outputs]
    fn.body.detach_block(old_block)
    for op in reversed(list(old_block.ops)):
        op.detach()
        op.erase(safe_erase=False)
    fn.body.add_block(block)
    fn.function_type = FunctionType.from_lists(arg_types, results)


@dataclass(frozen=True)
class LowerToKernels(V8Pass):
    """Turn resolved GraphIR ops into kernel invocations on buffers, pinned to the ledger."""

    name = "lower-to-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.walk() if isinstance(f, func.FuncOp)]:
            lower_function(fn)
