"""LoweredIR and call-ready IR of the v8 dialect.

LoweredIR (after ``lower-to-kernels``): buffers instead of tensors.
``v8.alloc`` makes an intermediate buffer, ``v8.view`` reinterprets one, and
``v8.kernel`` is one resolved kernel invocation on buffers (inputs, then the
output), still carrying its node, phase, op kind, scalar parameters and the
pinned ``resolved`` attribute.

Call-ready IR (after ``prepare-calls``): ``v8.arena_slice`` places a buffer at
a planned offset of the phase's arena, ``v8.call`` is a C call with its
complete argument list in the kernel map's ABI order, and ``v8.inline`` is an
elementwise op the C printer writes itself.  Both keep ``resolved``.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from v8dialect.attributes import PhaseAttr, ResolvedAttr

# What prepare-calls records for the C printer and the program builder: on each phase
# function its arena size, scratch sizes, output count, arguments written in place and run-time
# checks; on the module the kernel headers (relative to their maps' root) the calls need.
ARENA_ATTR = "v8.arena_bytes"
SCRATCH_ATTR = "v8.scratch_sizes"
OUTPUTS_ATTR = "v8.outputs"
CHECKS_ATTR = "v8.runtime_checks"
WRITTEN_ATTR = "v8.written_args"
HEADERS_ATTR = "v8.c_headers"


@irdl_attr_definition
class CExprAttr(ParametrizedAttribute):
    """A C expression in the entry point's scope: a selector constant, `pool`, `n_past + 16`."""

    name = "v8.cexpr"

    text: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return [StringAttr(parser.parse_str_literal())]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_string_literal(self.text.data)
        printer.print_string(">")


@irdl_op_definition
class AllocOp(IRDLOperation):
    """An intermediate buffer of one phase; prepare-calls gives it an arena offset."""

    name = "v8.alloc"

    result = result_def(MemRefType)

    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, memref_type: MemRefType[Attribute]) -> None:
        super().__init__(result_types=[memref_type])


@irdl_op_definition
class ViewOp(IRDLOperation):
    """The same bytes seen with another shape (a GraphIR reshape)."""

    name = "v8.view"

    source = operand_def(MemRefType)
    result = result_def(MemRefType)

    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, memref_type: MemRefType[Attribute]) -> None:
        super().__init__(operands=[source], result_types=[memref_type])


class PinnedOp(IRDLOperation):
    """An op that carries a graph node's pinned resolution."""

    node = prop_def(StringAttr)
    phase = prop_def(PhaseAttr)
    resolved = prop_def(ResolvedAttr)


@irdl_op_definition
class KernelOp(PinnedOp):
    """One resolved kernel invocation on buffers (LoweredIR).

    ``roles`` names each operand's role in the op ("q", "weight", "output", ...);
    ``params`` holds the op's scalar parameters (eps, scale, freq_base, ...).
    """

    name = "v8.kernel"

    kind = prop_def(StringAttr)
    roles = prop_def(ArrayAttr[StringAttr])
    params = prop_def(DictionaryAttr)
    buffers = var_operand_def(MemRefType)

    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = (
        "$kind $node $phase `(` $buffers `)` `roles` $roles `params` $params "
        "`resolved` qualified($resolved) attr-dict `:` type($buffers)"
    )

    def verify_(self) -> None:
        if len(self.roles.data) != len(self.buffers):
            raise VerifyException(f"{len(self.buffers)} buffers but {len(self.roles.data)} roles")

    def buffer(self, role: str) -> SSAValue:
        for name, value in zip(self.roles.data, self.buffers, strict=True):
            if name.data == role:
                return value
        raise KeyError(role)

    def has_role(self, role: str) -> bool:
        return any(r.data == role for r in self.roles.data)


@irdl_op_definition
class ArenaSliceOp(IRDLOperation):
    """A buffer at a planned byte offset of the phase's arena."""

    name = "v8.arena_slice"

    offset = prop_def(IntegerAttr[IndexType])
    result = result_def(MemRefType)

    assembly_format = "$offset attr-dict `:` type($result)"


CallArg = IntegerAttr | FloatAttr | CExprAttr


@irdl_op_definition
class CallOp(PinnedOp):
    """A C call in ABI order (call-ready IR).

    Each entry of ``args`` is one C argument: an ``index`` integer names
    operand #i (a buffer), an ``i64`` integer is a dimension constant, an
    ``f32`` float a scalar parameter, and #v8.cexpr a C expression (the
    selector constant, the threadpool, the scratch region, runtime lengths).
    """

    name = "v8.call"

    callee = prop_def(StringAttr)
    args = prop_def(ArrayAttr)
    buffers = var_operand_def(MemRefType)

    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = (
        "$callee $node $phase `(` $buffers `)` `args` $args `resolved` qualified($resolved) "
        "attr-dict `:` type($buffers)"
    )

    def verify_(self) -> None:
        for arg in self.args.data:
            match arg:
                case IntegerAttr(type=IndexType()):
                    if not 0 <= arg.value.data < len(self.buffers):
                        raise VerifyException(f"argument refers to buffer #{arg.value.data}, "
                                              f"but the call has {len(self.buffers)}")
                case IntegerAttr() | FloatAttr() | CExprAttr():
                    pass
                case _:
                    raise VerifyException(f"unsupported call argument {arg}")


@irdl_op_definition
class InlineOp(PinnedOp):
    """An elementwise op whose code the C printer writes (inputs, then the output)."""

    name = "v8.inline"

    kind = prop_def(StringAttr)
    buffers = var_operand_def(MemRefType)

    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = (
        "$kind $node $phase `(` $buffers `)` `resolved` qualified($resolved) attr-dict "
        "`:` type($buffers)"
    )


LOWERED_OPS: list[type[Operation]] = [AllocOp, ViewOp, KernelOp, ArenaSliceOp, CallOp, InlineOp]
LOWERED_ATTRIBUTES: list[type[Attribute]] = [CExprAttr]
