"""The C printer of one function of call-ready IR (emit_c.py prints the module around it).

An entry point (a phase) is exported and checks every argument before its first kernel runs; a
layer function is static and trusts its phase, which checked its requirements for it.  Statements
are one method per op (functools.singledispatchmethod); ``expr`` prints a value as the C expression
of its defining op (an entry-point parameter, the pool's worker count, an ``arith`` length).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, cast

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from v8dialect.diagnostics import V8Error, located, op_error
from v8dialect.ir.call_ready import (
    EntryValue,
    EntryValueOp,
    NullAttr,
    RequireOp,
    ScratchNeedOp,
    SelectorAttr,
    WorkersOp,
)
from v8dialect.ir.graph_op import dtype_name
from v8dialect.ir.lowered import (
    ARENA_ATTR,
    OUTPUTS_ATTR,
    WRITTEN_ATTR,
    ArenaSliceOp,
    CallOp,
    InlineOp,
    InvokeOp,
    LastRowOp,
    ViewOp,
)
from v8dialect.ir.narrowing import array_items, memref_type
from v8dialect.ir.structure import is_entry_point
from v8dialect.ir.token_count import RUNTIME_TOKENS, max_tokens
from v8dialect.lowering.call_values import SLE

STAGE = "emit-c"

C_ELEMENT = {"f32": "float", "f16": "uint16_t", "bf16": "uint16_t", "i32": "int32_t",
             "q4_k": "void", "q5_k": "void", "q6_k": "void", "q8_0": "void", "q5_0": "void",
             "q4_0": "void", "q4_1": "void", "q5_1": "void"}
C_KEYWORDS = frozenset({"int", "float", "double", "char", "void", "return", "if", "else", "for",
                        "while", "const", "static", "pool", "n_past", "n_tokens", "arena", "scratch",
                        "scratch_bytes", "st", "base", "auto", "case", "default"})
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def element_c_type(value: SSAValue) -> str:
    memref = memref_type(value.type)
    assert memref is not None
    return C_ELEMENT[dtype_name(memref.get_element_type())]


ENTRY_NAMES = {EntryValue.POOL: "pool", EntryValue.N_PAST: "n_past", EntryValue.N_TOKENS: RUNTIME_TOKENS,
               EntryValue.SCRATCH: "scratch", EntryValue.SCRATCH_BYTES: "scratch_bytes"}


def reads_pool(value: SSAValue) -> bool:
    """Whether `value` is computed from the threadpool (the scratch function then uses `pool`)."""
    owner = value.owner
    if isinstance(owner, EntryValueOp):
        return owner.entry is EntryValue.POOL
    return isinstance(owner, Operation) and any(reads_pool(v) for v in owner.operands)



@dataclass
class CWriter:
    out: IO[str]
    indent: int = 0

    def line(self, text: str = "") -> None:
        self.out.write(("    " * self.indent + text).rstrip() + "\n")


@dataclass
class PhasePrinter:
    fn: func.FuncOp
    w: CWriter
    pool_users: set[str] = field(default_factory=set[str])  # functions that run kernels on the pool
    names: dict[SSAValue, str] = field(default_factory=dict[SSAValue, str])
    # a profiled build: each call's and inline op's index in the module's site table
    sites: dict[Operation, int] | None = None

    @property
    def entry(self) -> bool:
        """An exported phase (checks its arguments) or a static layer function (its phase did)."""
        return is_entry_point(self.fn)

    @property
    def phase(self) -> str:
        return self.fn.sym_name.data

    @property
    def max_tokens(self) -> int | None:
        """The most tokens of a phase whose token count is its n_tokens argument."""
        return max_tokens(self.fn)

    def n_outputs(self) -> int:
        attr = self.fn.attributes.get(OUTPUTS_ATTR)
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def parameters(self) -> list[str]:
        args = list(self.fn.body.block.args)
        first_output = len(args) - self.n_outputs()
        written_items = array_items(self.fn.attributes.get(WRITTEN_ATTR))
        written = ({a.value.data for a in written_items if isinstance(a, IntegerAttr)}
                   if written_items is not None else set[int]())
        params: list[str] = []
        used: set[str] = set()
        for i, arg in enumerate(args):
            name = self.unique_name(arg, used, i)
            const = "" if i >= first_output or i in written else "const "
            params.append(f"{const}{element_c_type(arg)} *{name}")
        return params

    def unique_name(self, arg: BlockArgument, used: set[str], index: int) -> str:
        hint = arg.name_hint or ""
        name = hint if IDENTIFIER.fullmatch(hint) and hint not in C_KEYWORDS else f"arg{index}"
        while name in used:
            name += "_"
        used.add(name)
        self.names[arg] = name
        return name

    def print(self) -> None:
        arena = self.fn.attributes.get(ARENA_ATTR)
        assert isinstance(arena, IntegerAttr)
        if self.entry:
            self.w.line(f"/* ---- phase {self.phase} ---- */")
            self.w.line(f"size_t {self.phase}_arena_bytes(void) {{ return {arena.value.data}u; }}")
        else:
            self.w.line(f"/* ---- layer function {self.phase}: {arena.value.data} bytes of its "
                        "caller's arena ---- */")
        self.w.line()
        self.print_scratch_function()
        self.w.line(f"{'' if self.entry else 'static '}{self.entry_signature()} {{")
        self.w.indent += 1
        if self.entry:
            self.print_checks()
        self.print_preamble()
        for op in self.fn.body.block.ops:
            self.print_op(op)
        self.w.indent -= 1
        self.w.line("}")
        self.w.line()

    def counts(self) -> list[str]:
        """The count parameters: n_past, and n_tokens when the token count is a run-time value."""
        return ["n_past"] + ([RUNTIME_TOKENS] if self.max_tokens else [])

    def entry_signature(self) -> str:
        params = ", ".join(["v8_threadpool *pool", *(f"int64_t {c}" for c in self.counts()),
                            "void *arena", "void *scratch", "size_t scratch_bytes", *self.parameters()])
        return f"v8_status {self.phase}({params})"

    def print_declarations(self) -> None:
        self.w.line(f"size_t {self.phase}_arena_bytes(void);")
        self.w.line(f"size_t {self.phase}_scratch_bytes(v8_threadpool *pool);")
        self.w.line(f"{self.entry_signature()};")

    def print_packed_entry(self) -> None:
        """`<phase>_packed`: the entry point with its buffers (inputs, then outputs) as one array
        of pointers.  A model's phase takes hundreds of buffers; a binding that converts each as a
        parameter of its own costs more to compile than the program itself."""
        params = ["v8_threadpool *pool", *(f"int64_t {c}" for c in self.counts()), "void *arena",
                  "void *scratch", "size_t scratch_bytes", "void *const *buffers"]
        self.w.line(f"v8_status {self.phase}_packed({', '.join(params)}) {{")
        buffers = [f"buffers[{i}]" for i in range(len(self.fn.body.block.args))]
        args = ["pool", *self.counts(), "arena", "scratch", "scratch_bytes", *buffers]
        self.w.line(f"    return {self.phase}({', '.join(args)});")
        self.w.line("}")

    def print_scratch_function(self) -> None:
        static = "" if self.entry else "static "
        self.w.line(f"{static}size_t {self.phase}_scratch_bytes(v8_threadpool *pool) {{")
        self.w.indent += 1
        self.w.line("size_t need = 0;")
        uses_pool = False
        for need in self.fn.body.block.ops:
            if isinstance(need, ScratchNeedOp):
                uses_pool |= any(reads_pool(v) for v in need.values)
                args = [self.argument(need.values, a) for a in need.args.data]
                self.w.line(f"need = v8_max_size(need, {need.function.data}({', '.join(args)}));")
        if not uses_pool:
            self.w.line("(void)pool;")
        self.w.line("return need;")
        self.w.indent -= 1
        self.w.line("}")
        self.w.line()

    def print_checks(self) -> None:
        pointers = ["arena"] + [self.names[a] for a in self.fn.body.block.args]
        self.w.line("/* every argument is checked before the first kernel writes anything */")
        self.w.line(f"V8_REQUIRE({' && '.join(f'{p} != NULL' for p in pointers)}, V8_ERR_NULL_ARGUMENT);")
        if self.uses_threadpool():
            self.w.line("V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);")
        self.w.line("V8_REQUIRE(n_past >= 0, V8_ERR_BAD_DIMENSION);")
        if self.max_tokens:
            self.w.line(f"V8_REQUIRE({RUNTIME_TOKENS} >= 1 && {RUNTIME_TOKENS} <= {self.max_tokens}, "
                        "V8_ERR_BAD_DIMENSION);")
        for limit in self.runtime_checks():
            self.w.line(f"V8_REQUIRE({limit}, V8_ERR_BAD_DIMENSION);")
        self.w.line(f"V8_REQUIRE(scratch_bytes >= {self.phase}_scratch_bytes(pool) && "
                    "(scratch != NULL || scratch_bytes == 0), V8_ERR_BAD_DIMENSION);")

    def print_preamble(self) -> None:
        # a layer function need not read every context parameter its caller passes on
        if not self.entry:
            self.w.line(" ".join(f"(void){name};" for name in ["pool", "scratch_bytes", *self.counts()[1:]]))
        self.w.line("(void)scratch;")
        self.w.line("(void)n_past;")
        self.w.line("char *base = (char *)arena;")
        self.w.line("(void)base;")
        self.w.line("v8_status st = V8_OK;")
        self.w.line("(void)st;")

    def uses_threadpool(self) -> bool:
        return any((isinstance(op, CallOp) and op.resolved.calls_threadpool)
                   or (isinstance(op, InvokeOp) and op.callee.string_value() in self.pool_users)
                   for op in self.fn.body.block.ops)

    def runtime_checks(self) -> Iterator[str]:
        """Conditions prepare-calls derived from the kernels' ABIs (e.g. KV capacity)."""
        for op in self.fn.body.block.ops:
            if isinstance(op, RequireOp):
                yield self.expr(op.condition)

    # ---- statements: one method per op ----

    @functools.singledispatchmethod
    def print_op(self, op: Operation) -> None:
        raise V8Error([op_error(op, f"{STAGE}: cannot print '{op.name}'")])

    @print_op.register
    def _print_arena_slice(self, op: ArenaSliceOp) -> None:
        name = f"b{len(self.names)}"
        self.names[op.result] = name
        c_type = element_c_type(op.result)
        self.w.line(f"{c_type} *{name} = ({c_type} *)(base + {op.offset.value.data});")

    @print_op.register
    def _print_view(self, op: ViewOp) -> None:
        self.names[op.result] = self.names[op.source]

    @print_op.register
    def _print_last_row(self, op: LastRowOp) -> None:
        name = f"b{len(self.names)}"
        self.names[op.result] = name
        c_type = element_c_type(op.result)
        source = memref_type(op.source.type)
        assert source is not None
        dims = [int(d) for d in source.get_shape()]  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportUnknownArgumentType]
        per_token = math.prod(dims[1:])
        rows_before = f"({self.elements(dims[0], 1)} - 1)"
        # only ever read (a phase result is a kernel's own buffer), so const whatever its source
        self.w.line(f"const {c_type} *{name} = {self.names[op.source]} + {rows_before} * {per_token};")

    @print_op.register
    def _print_call(self, op: CallOp) -> None:
        self.print_call(op)

    @print_op.register
    def _print_inline(self, op: InlineOp) -> None:
        self.print_inline(op)

    @print_op.register
    def _print_invoke(self, op: InvokeOp) -> None:
        assert op.arena_offset is not None  # prepare-calls placed the callee's arena
        args = ["pool", *self.counts(), f"base + {op.arena_offset.value.data}", "scratch",
                "scratch_bytes", *(self.expr(v) for v in op.values)]
        self.print_checked(f"{op.callee.string_value()}({', '.join(args)})")

    @print_op.register
    def _print_return(self, op: func.ReturnOp) -> None:
        self.w.line("return V8_OK;")

    # the entry point's values and lengths are expressions (see expr); requirements and
    # scratch needs are printed in the checks and in <phase>_scratch_bytes
    @print_op.register(EntryValueOp)
    @print_op.register(WorkersOp)
    @print_op.register(arith.ConstantOp)
    @print_op.register(arith.AddiOp)
    @print_op.register(arith.MuliOp)
    @print_op.register(arith.CmpiOp)
    @print_op.register(RequireOp)
    @print_op.register(ScratchNeedOp)
    def _print_nothing(self, op: Operation) -> None:
        pass

    # ---- expressions: the C text of a value, from its defining op ----

    def expr(self, value: SSAValue) -> str:
        if value in self.names:
            return self.names[value]
        return self.expr_of(value.owner, value)

    @functools.singledispatchmethod
    def expr_of(self, owner: Operation | Block, value: SSAValue) -> str:
        raise V8Error([located("<module>", f"{STAGE}: no C expression for {value}")])

    @expr_of.register
    def _entry_expr(self, owner: EntryValueOp, value: SSAValue) -> str:
        return ENTRY_NAMES[owner.entry]

    @expr_of.register
    def _workers_expr(self, owner: WorkersOp, value: SSAValue) -> str:
        return f"v8_threadpool_workers({self.expr(owner.pool)})"

    @expr_of.register
    def _constant_expr(self, owner: arith.ConstantOp, value: SSAValue) -> str:
        return str(int_value(owner.value))

    @expr_of.register
    def _add_expr(self, owner: arith.AddiOp, value: SSAValue) -> str:
        return f"{self.expr(owner.lhs)} + {self.expr(owner.rhs)}"

    @expr_of.register
    def _mul_expr(self, owner: arith.MuliOp, value: SSAValue) -> str:
        return f"{self.expr(owner.lhs)} * {self.expr(owner.rhs)}"

    @expr_of.register
    def _compare_expr(self, owner: arith.CmpiOp, value: SSAValue) -> str:
        if owner.predicate.value.data != SLE:
            raise V8Error([op_error(owner, f"{STAGE}: only `sle` comparisons are printed")])
        return f"{self.expr(owner.lhs)} <= {self.expr(owner.rhs)}"

    def comment(self, op: CallOp | InlineOp) -> None:
        r = op.resolved
        ex = r.execution
        self.w.line(f"/* {op.node.data}: {r.word('kernel')} delivers {r.word('contract')}; "
                    f"{ex.word('runtime')} {ex.word('partition')}, order effect "
                    f"{ex.word('reduction_order_effect')} */")

    def print_call(self, op: CallOp) -> None:
        self.comment(op)
        args = [self.argument(op.values, a) for a in op.args.data]
        self.print_checked(f"{op.callee.data}({', '.join(args)})", timed=op)

    def print_timed(self, op: CallOp | InlineOp, statement: str) -> None:
        """The statement, and in a profiled build between two clock reads added to op's site."""
        if self.sites is None:
            self.w.line(statement)
            return
        self.w.line("{")
        self.w.line("    const uint64_t t0 = v8_profile_clock_ns();")
        self.w.line(f"    {statement}")
        self.w.line(f"    v8_profile_add(&v8_profile_table[{self.sites[op]}], t0);")
        self.w.line("}")

    def print_checked(self, call: str, timed: CallOp | None = None) -> None:
        """A call whose status the function returns unless it is V8_OK (timed: a kernel call,
        which a profiled build times)."""
        if timed is None:
            self.w.line(f"st = {call};")
        else:
            self.print_timed(timed, f"st = {call};")
        self.w.line("if (st != V8_OK) {")
        self.w.line("    return st;")
        self.w.line("}")

    def argument(self, values: Sequence[SSAValue], arg: Attribute) -> str:
        """One C argument: operand #i's expression or a typed constant's literal."""
        match arg:
            case IntegerAttr(type=IndexType()):
                return self.expr(values[arg.value.data])
            case IntegerAttr():
                return str(arg.value.data)
            case FloatAttr():
                return c_float(arg.value.data)
            case SelectorAttr():
                return arg.constant.data
            case NullAttr():
                return "NULL"
            case DenseArrayBase():
                # a C99 compound literal: the array lives in the call itself
                ints = cast(DenseArrayBase[IntegerType], arg)
                element = C_ELEMENT[dtype_name(ints.elt_type)]
                listed = ", ".join(str(int(v)) for v in ints.get_values())
                return f"(const {element}[]){{{listed}}}"
            case _:
                raise V8Error([located("<module>", f"{STAGE}: cannot print argument {arg}")])

    def print_inline(self, op: InlineOp) -> None:
        self.comment(op)
        *inputs, out = op.buffers
        if len(inputs) != 2:
            raise V8Error([op_error(op, f"{STAGE}: inline '{op.kind.data}' takes two inputs")])
        assert isinstance(out.type, MemRefType)
        dims = [int(d) for d in out.type.get_shape()]  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportUnknownArgumentType]
        per_token = 1
        for d in dims[1:]:
            per_token *= d
        names = [self.names[v] for v in (out, *inputs)]
        self.print_timed(op, f"v8_inline_{op.kind.data}({', '.join(names)}, "
                             f"{self.elements(dims[0], per_token)});")

    def elements(self, tokens: int, per_token: int) -> str:
        """The element count of `tokens` rows: with the phase's run-time token count, n_tokens rows."""
        if self.max_tokens is None or tokens != self.max_tokens:
            return str(tokens * per_token)
        return RUNTIME_TOKENS if per_token == 1 else f"{RUNTIME_TOKENS} * {per_token}"


def int_value(attr: Attribute) -> int:
    assert isinstance(attr, IntegerAttr)
    return attr.value.data


def c_float(value: float) -> str:
    """A float32 literal that reads back to the same bits (9 significant digits suffice)."""
    text = format(value, ".9g")
    if not any(c in text for c in ".en"):
        text += ".0"
    return f"{text}f"
