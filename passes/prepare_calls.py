"""prepare-calls: LoweredIR -> call-ready IR bound to each kernel map's C ABI.

- Memory plan: every intermediate buffer of a phase gets an offset in that
  phase's arena; a buffer's bytes are reused once its last reader has run
  (first fit, 64-byte aligned).  The phase's results become trailing output
  arguments, written in place by the kernels that produce them.
- Each ``v8.kernel`` becomes a ``v8.call`` whose arguments follow the map's
  ABI: buffers, dimension constants, the resolved contract's selector
  constant, the threadpool when the resolved execution says threadpool, and
  the shared scratch region sized at run time by the map's scratch function
  (a ``v8.scratch_need``).  The entry point's values (pool, n_past, scratch)
  and lengths derived from them are SSA values at the top of the phase (see
  v8dialect/ir/call_ready.py); every function a call binds gets one
  ``v8.kernel_decl`` with its map's ABI as signature.  Elementwise ops the
  printer owns become ``v8.inline``.
- The functions bound must be the ones the kernel map binds and the ledger
  pinned; the pass checks both, and every op against the ledger.
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
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from v8dialect.data.kernel_maps import KernelMap, KernelMapSet
from v8dialect.data.pipeline_data import pipeline_data
from v8dialect.diagnostics import V8Error, op_error
from v8dialect.ir.call_ready import EntryValue, KernelDeclOp, RequireOp, ir_type
from v8dialect.ir.lowered import (
    ALIASING_OPS,
    ARENA_ATTR,
    OUTPUTS_ATTR,
    WRITTEN_ATTR,
    AllocOp,
    ArenaSliceOp,
    CallOp,
    InlineOp,
    InvokeOp,
    KernelOp,
)
from v8dialect.ir.narrowing import array_items
from v8dialect.ir.structure import is_entry_point
from v8dialect.ir.token_count import max_tokens
from v8dialect.lowering.abi_binding import BUFFER_ALIASES, BindingError, bind
from v8dialect.lowering.call_values import FunctionValues, Tokens

ALIGNMENT = 64

ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}


def element_bytes(memref: MemRefType[Attribute]) -> int:
    from v8dialect.ir.graph_op import dtype_name

    name = dtype_name(memref.get_element_type())  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    if name not in ELEMENT_BYTES:
        raise ValueError(f"no arena layout for element type {name}")
    return ELEMENT_BYTES[name]


def buffer_bytes(memref: MemRefType[Attribute]) -> int:
    total = element_bytes(memref)
    for d in memref.get_shape():  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
        total *= int(d)  # pyright: ignore[reportUnknownArgumentType]
    return total


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


# ---- memory plan -----------------------------------------------------------------


def last_use(value: SSAValue, position: dict[Operation, int]) -> int:
    """Index of the last op reading value, following views (they alias it)."""
    last = -1
    for use in value.uses:
        last = max(last, position[use.operation])
        if isinstance(use.operation, ALIASING_OPS):
            last = max(last, last_use(use.operation.results[0], position))
    return last


def first_fit(size: int, live: list[tuple[int, int]]) -> int:
    """Lowest aligned offset where [offset, offset + size) misses every live block."""
    offset = 0
    for start, end in sorted(live):
        if offset + size <= start:
            break
        offset = max(offset, align(end))
    return offset


@dataclass(frozen=True)
class Claim:
    """Arena bytes an op needs from its own position through `last` (a buffer until its last
    reader; a layer function's own arena while the call runs)."""

    op: Operation
    size: int
    last: int


def plan_arena(claims: list[Claim], position: dict[Operation, int]) -> tuple[dict[Operation, int], int]:
    offsets: dict[Operation, int] = {}
    live: list[tuple[int, int, int]] = []  # (start, end, last use)
    arena = 0
    for claim in claims:
        here = position[claim.op]
        live = [blk for blk in live if blk[2] >= here]
        size = align(claim.size)
        offset = first_fit(size, [(s, e) for s, e, _ in live])
        offsets[claim.op] = offset
        live.append((offset, offset + size, claim.last))
        arena = max(arena, offset + size)
    return offsets, arena


# ---- function rewriting ------------------------------------------------------------


@dataclass
class FunctionPreparation:
    fn: func.FuncOp
    maps: KernelMapSet
    decls: dict[str, KernelDeclOp]  # callee -> its declaration, shared by the module's phases
    layer_functions: dict[str, func.FuncOp]  # the prepared layer functions this one may invoke

    def run(self) -> None:
        self.tokens = Tokens(FunctionValues(self.fn.body.block), max_tokens(self.fn))
        written = self.written_arguments()
        outputs = self.bind_outputs()
        ops = list(self.fn.body.block.ops)
        position = {op: i for i, op in enumerate(ops)}
        claims = [self.claim(op, position) for op in ops if isinstance(op, AllocOp | InvokeOp)]
        offsets, arena = plan_arena(claims, position)
        for op in ops:
            if isinstance(op, AllocOp):
                self.replace(op, ArenaSliceOp.create(
                    properties={"offset": IntegerAttr(offsets[op], IndexType())},
                    result_types=[op.result.type]))
            elif isinstance(op, KernelOp):
                self.replace(op, self.call_for(op))
            elif isinstance(op, InvokeOp):
                self.prepare_invoke(op, offsets[op])
        self.tokens.values.drop_unused()
        self.fn.attributes[ARENA_ATTR] = IntegerAttr(arena, IndexType())
        self.fn.attributes[OUTPUTS_ATTR] = IntegerAttr(outputs, IndexType())
        self.fn.attributes[WRITTEN_ATTR] = ArrayAttr([IntegerAttr(i, IndexType()) for i in written])

    def callee(self, op: InvokeOp) -> func.FuncOp:
        found = self.layer_functions.get(op.callee.string_value())
        if found is None:
            raise V8Error([op_error(op, f"prepare-calls: '{op.callee.string_value()}' is no layer "
                                    "function of this module")])
        return found

    def claim(self, op: AllocOp | InvokeOp, position: dict[Operation, int]) -> Claim:
        if isinstance(op, AllocOp):
            return Claim(op, buffer_bytes(op.result.type), last_use(op.result, position))  # pyright: ignore[reportArgumentType]
        arena = self.callee(op).attributes.get(ARENA_ATTR)
        assert isinstance(arena, IntegerAttr)  # layer functions are prepared first
        return Claim(op, arena.value.data, position[op])

    def prepare_invoke(self, op: InvokeOp, offset: int) -> None:
        """Place the callee's arena, and make the caller size the scratch and check the
        conditions the callee's kernels need (before any kernel of the phase runs)."""
        op.arena_offset = IntegerAttr(offset, IndexType())
        callee = self.callee(op)
        values = self.tokens.values
        values.scratch_need(f"{callee.sym_name.data}_scratch_bytes", [values.entry(EntryValue.POOL)])
        for need in callee.body.block.ops:
            if isinstance(need, RequireOp):
                values.require(values.rebuilt(need.condition))

    def written_arguments(self) -> list[int]:
        """Arguments a kernel updates in place, so the entry point takes them non-const: a KV
        cache (the result of an in-place op) and any buffer the kernel map's ABI declares an
        output besides the result (a recurrent layer's conv_state and ssm_state)."""
        found: set[int] = set()
        for op in self.fn.body.block.ops:
            if isinstance(op, InvokeOp):
                found |= self.written_through(op)
            if not isinstance(op, KernelOp):
                continue
            written = {"out"}
            kmap = self.maps.get(op.resolved.word("kernel"))
            if kmap is not None:
                written |= {BUFFER_ALIASES.get(a.name, a.name) for a in kmap.abi_args
                            if a.role == "output"}
            for role, value in zip(op.roles.data, op.buffers, strict=True):
                if role.data in written and isinstance(value, BlockArgument):
                    found.add(value.index)
        return sorted(found)

    def written_through(self, op: InvokeOp) -> set[int]:
        """This function's arguments a layer function writes: those passed where it writes its
        own arguments (its outputs are the caller's buffers, written anyway)."""
        callee_written = {i.value.data for i in array_items(self.callee(op).attributes.get(WRITTEN_ATTR)) or ()
                          if isinstance(i, IntegerAttr)}
        return {value.index for i, value in enumerate(op.values)
                if i in callee_written and isinstance(value, BlockArgument)}

    def bind_outputs(self) -> int:
        """The phase's results become trailing arguments the producing kernels write."""
        block = self.fn.body.block
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        n_outputs = len(ret.arguments)
        for value in ret.arguments:
            producer = value.owner
            if not isinstance(producer, AllocOp):
                raise V8Error([op_error(ret, "prepare-calls: a phase result must be a kernel's own "
                                        "output buffer (not an argument or a view)")])
            arg = block.insert_arg(value.type, len(block.args))
            arg.name_hint = "out"
            value.replace_all_uses_with(arg)
            producer.detach()
            producer.erase()
        new_ret = func.ReturnOp()
        new_ret.location = ret.location
        block.insert_op_before(new_ret, ret)
        ret.detach()
        ret.erase()
        inputs = [a.type for a in block.args]
        self.fn.function_type = FunctionType.from_lists(inputs, [])
        if self.fn.arg_attrs is not None:
            # one entry per argument: the printer pairs them up and would drop the outputs
            attrs = list(self.fn.arg_attrs.data)
            attrs += [DictionaryAttr({})] * (len(inputs) - len(attrs))
            self.fn.arg_attrs = ArrayAttr(attrs)
        return n_outputs

    def call_for(self, op: KernelOp) -> Operation:
        common = {"node": op.node, "phase": op.phase, "resolved": op.resolved}
        if op.resolved.word("emission") == "inline":
            return InlineOp.create(operands=list(op.buffers), properties={"kind": op.kind, **common})
        kmap = self.maps.get(op.resolved.word("kernel"))
        if kmap is None:
            raise V8Error([op_error(op, f"prepare-calls: kernel '{op.resolved.word('kernel')}' is in "
                                    "no loaded kernel map")])
        for role in ("oracle", "production", "threadpool"):
            pinned, bound = op.resolved.word(role), kmap.function(role)
            if pinned and pinned != bound:
                raise V8Error([op_error(op, f"prepare-calls: kernel map '{kmap.id}' binds {role} "
                                        f"'{bound}' but the resolution pinned '{pinned}'")])
        try:
            call = bind(op, kmap, self.tokens)
        except BindingError as e:
            raise V8Error([op_error(op, f"prepare-calls: kernel '{kmap.id}': {e}")]) from None
        if call.callee not in self.decls:
            self.decls[call.callee] = self.declaration(op, kmap, call.callee)
        return CallOp.create(
            operands=call.operands,
            properties={"callee": StringAttr(call.callee), "args": ArrayAttr(call.args), **common},
        )

    @staticmethod
    def declaration(op: KernelOp, kmap: KernelMap, callee: str) -> KernelDeclOp:
        """The callee's C signature, as its kernel map's ABI gives it."""
        params = [("pool", "v8_threadpool *")] if op.resolved.calls_threadpool else []
        params += [(a.name, a.ctype) for a in kmap.abi_args]
        try:
            types = [ir_type(ctype) for _, ctype in params]
            returns = ir_type(kmap.abi_returns)
        except ValueError as e:
            raise V8Error([op_error(op, f"prepare-calls: kernel map '{kmap.id}': {e}")]) from None
        return KernelDeclOp.create(properties={
            "sym_name": StringAttr(callee), "function_type": FunctionType.from_lists(types, [returns]),
            "arg_names": ArrayAttr([StringAttr(name) for name, _ in params]),
            "kernel": StringAttr(kmap.id), "header": StringAttr(kmap.header)})

    @staticmethod
    def replace(old: Operation, new: Operation) -> None:
        new.location = old.location
        block = old.parent_block()
        assert block is not None
        block.insert_op_before(new, old)
        for a, b in zip(old.results, new.results, strict=True):
            a.replace_all_uses_with(b)
        old.detach()
        old.erase()


@dataclass(frozen=True)
class PrepareCalls(V8Pass):
    """Plan each phase's arena and bind every kernel call to its C ABI."""

    name = "prepare-calls"

    kernel_maps: str | None = None
    """Kernel-map locations (default: those an earlier pass of the pipeline named, e.g.
    resolve-contracts, else the packaged ones)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        maps = pipeline_data(ctx).kernel_maps()
        decls: dict[str, KernelDeclOp] = {}
        functions = [f for f in op.walk() if isinstance(f, func.FuncOp)]
        layer_functions: dict[str, func.FuncOp] = {}
        # layer functions first: a phase's plan needs their arenas and what they write
        for fn in sorted(functions, key=is_entry_point):
            FunctionPreparation(fn, maps, decls, layer_functions).run()
            if not is_entry_point(fn):
                layer_functions[fn.sym_name.data] = fn
        # the declarations lead the module, by name
        first = op.body.block.first_op
        for name in sorted(decls):
            if first is None:
                op.body.block.add_op(decls[name])
            else:
                op.body.block.insert_op_before(decls[name], first)
