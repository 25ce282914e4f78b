"""LoweredIR and call-ready IR of the v8 dialect.

LoweredIR (after ``lower-to-kernels``): buffers instead of tensors.
``v8.alloc`` makes an intermediate buffer, ``v8.view`` reinterprets one,
``v8.last_row`` is the last token's row of one, and
``v8.kernel`` is one resolved kernel invocation on buffers (inputs, then the
output), still carrying its node, phase, op kind, scalar parameters and the
pinned ``resolved`` attribute.

Call-ready IR (after ``prepare-calls``): ``v8.arena_slice`` places a buffer at
a planned offset of the phase's arena, ``v8.call`` is a C call with its
complete argument list in the kernel map's ABI order (SSA values and typed
constants; the types, declarations and entry-point values are in
v8dialect/ir/call_ready.py), and ``v8.inline`` is an elementwise op the C
printer writes itself.  Both keep ``resolved``.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from v8dialect.ir.call_ready import CALL_READY_ATTRIBUTES, CALL_READY_OPS, check_args
from v8dialect.ir.resolution_attrs import ResolvedAttr
from v8dialect.ir.types import PhaseAttr

# What prepare-calls records on each phase function for the C printer and the program
# builder: its arena size, output count and the arguments kernels write in place.
ARENA_ATTR = "v8.arena_bytes"
OUTPUTS_ATTR = "v8.outputs"
WRITTEN_ATTR = "v8.written_args"


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
class LastRowOp(IRDLOperation):
    """The last token's row of a [tokens, ...] buffer, in place (a GraphIR last_token): row
    n_tokens-1 when the phase takes its token count at run time and the buffer has the built
    count, else its last row."""

    name = "v8.last_row"

    source = operand_def(MemRefType)
    result = result_def(MemRefType)

    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, memref_type: MemRefType[Attribute]) -> None:
        super().__init__(operands=[source], result_types=[memref_type])

    def verify_(self) -> None:
        src, dst = self.source.type, self.result.type
        assert isinstance(src, MemRefType) and isinstance(dst, MemRefType)
        dims = tuple(src.get_shape())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
        if (len(dims) < 2 or src.get_element_type() != dst.get_element_type()  # pyright: ignore[reportUnknownMemberType]
                or tuple(dst.get_shape()) != (1, *dims[1:])):  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
            raise VerifyException(f"the last row of {src} is a {dims[1:]} row of its element type, "
                                  f"not {dst}")


# Ops whose one result is (part of) their operand's buffer: a buffer lives while any is read.
ALIASING_OPS: tuple[type[Operation], ...] = (ViewOp, LastRowOp)


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


@irdl_op_definition
class CallOp(PinnedOp):
    """A C call in ABI order (call-ready IR).

    Each entry of ``args`` is one C argument: an ``index`` integer names operand #i (a buffer,
    the pool, n_past or a length derived from it, the scratch region), any other entry is a
    typed constant: an ``i64``/``i32`` integer, an ``f32`` float, the selector constant
    (#v8.selector), #v8.null or a constant array.  ``callee`` names the call's v8.kernel_decl.
    """

    name = "v8.call"

    callee = prop_def(StringAttr)
    args = prop_def(ArrayAttr)
    values = var_operand_def()

    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = (
        "$callee $node $phase `(` $values `)` `args` $args `resolved` qualified($resolved) "
        "attr-dict `:` type($values)"
    )

    def verify_(self) -> None:
        check_args(self, self.args, self.values)


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


@irdl_op_definition
class InvokeOp(IRDLOperation):
    """A layer function run on buffers: its inputs, then the buffers its results go to (see
    v8dialect/builder/layers.py).  prepare-calls sets `arena_offset`, where the callee's own
    arena starts inside the caller's while the call runs."""

    name = "v8.invoke"

    callee = prop_def(SymbolRefAttr)
    n_outputs = prop_def(IntegerAttr[IndexType])
    arena_offset = opt_prop_def(IntegerAttr[IndexType])
    values = var_operand_def(MemRefType)

    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = (
        "$callee `(` $values `)` `outputs` $n_outputs (`arena` $arena_offset^)? attr-dict `:` type($values)"
    )

    def __init__(self, callee: str, values: list[SSAValue], n_outputs: int) -> None:
        super().__init__(operands=[values], properties={
            "callee": SymbolRefAttr(callee), "n_outputs": IntegerAttr(n_outputs, IndexType())})

    @property
    def outputs(self) -> int:
        return self.n_outputs.value.data

    def verify_(self) -> None:
        if not 0 <= self.outputs <= len(self.values):
            raise VerifyException(f"{self.outputs} outputs but {len(self.values)} buffers")


LOWERED_OPS: list[type[Operation]] = [AllocOp, ViewOp, LastRowOp, KernelOp, ArenaSliceOp, CallOp, InlineOp,
                                      InvokeOp, *CALL_READY_OPS]
LOWERED_ATTRIBUTES: list[type[Attribute]] = [*CALL_READY_ATTRIBUTES]
