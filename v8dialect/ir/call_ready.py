"""Typed call-ready IR: the C entry point's values, kernel declarations and call arguments.

prepare-calls turns each phase into ops the C printer prints one by one; nothing in them is C
source text:

- ``v8.entry_value`` is one of the entry point's own parameters (the threadpool, ``n_past``, a
  decoder prefill's ``n_tokens``, the scratch region and its size); ``v8.workers`` is the pool's
  worker count.  Run-time lengths are ``arith`` ops on them (``n_past + 16``, ``n_tokens * 1024``).
- ``v8.require`` is a condition the entry point checks before any kernel runs (the KV capacity);
  ``v8.scratch_need`` a kernel's scratch size, a call of its map's scratch function, which the
  phase's ``<phase>_scratch_bytes(pool)`` takes the maximum of.
- ``v8.kernel_decl`` declares one C function a call binds, with the signature its kernel map's
  ABI gives (``!v8.threadpool``, ``!v8.ptr<...>``, integers, ``index`` for size_t) returning
  ``!v8.status``, the map it comes from and the header that declares it.
- A call argument that is not an SSA value is a typed constant: an integer or float, a selector
  constant of the kernel's header (``#v8.selector<"V8_...">``), ``#v8.null`` or a constant array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    Float32Type,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneType,
    Signedness,
    StringAttr,
    SymbolNameConstraint,
    f32,
    i32,
    i64,
)
from xdsl.dialects.utils.enum_attribute import EnumAttribute
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, SSAValue, TypeAttribute
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
from xdsl.traits import SymbolOpInterface
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

# ---- types -----------------------------------------------------------------------------


@irdl_attr_definition
class ThreadpoolType(ParametrizedAttribute, TypeAttribute):
    """`v8_threadpool *`: the pool a threadpool kernel runs on."""

    name = "v8.threadpool"


@irdl_attr_definition
class StatusType(ParametrizedAttribute, TypeAttribute):
    """`v8_status`: what every kernel returns."""

    name = "v8.status"


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """A C pointer: `!v8.ptr<f32>` is `float *`, `!v8.ptr<const none>` is `const void *`."""

    name = "v8.ptr"

    pointee: Attribute
    const: IntegerAttr

    def __init__(self, pointee: Attribute, const: bool = False) -> None:
        super().__init__(pointee, IntegerAttr(int(const), 1))

    @property
    def is_const(self) -> bool:
        return bool(self.const.value.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            const = parser.parse_optional_keyword("const") is not None
            pointee = parser.parse_type()
        return [pointee, IntegerAttr(int(const), 1)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<const " if self.is_const else "<")
        printer.print_attribute(self.pointee)
        printer.print_string(">")


ui16 = IntegerType(16, Signedness.UNSIGNED)

# The C types kernel-map ABIs use, as IR types.
C_SCALARS: dict[str, Attribute] = {"int": i32, "int64_t": i64, "float": f32, "size_t": IndexType()}
C_POINTEES: dict[str, Attribute] = {"float": f32, "int32_t": i32, "uint16_t": ui16, "void": NoneType()}
C_SCALAR_NAMES = {i32: "int", i64: "int64_t", f32: "float", IndexType(): "size_t"}


def ir_type(ctype: str) -> Attribute:
    """The IR type of a kernel-map ABI C type (`const float *`, `int64_t`, `v8_threadpool *`)."""
    text = " ".join(ctype.replace("*", " * ").split())
    if text == "v8_threadpool *":
        return ThreadpoolType()
    if text == "v8_status":
        return StatusType()
    if text in C_SCALARS:
        return C_SCALARS[text]
    const = text.startswith("const ")
    pointee = text.removeprefix("const ").removesuffix(" *")
    if text.endswith(" *") and pointee in C_POINTEES:
        return PtrType(C_POINTEES[pointee], const)
    raise ValueError(f"no IR type for the C type '{ctype}'")


# ---- typed constants --------------------------------------------------------------------


@irdl_attr_definition
class SelectorAttr(ParametrizedAttribute):
    """A selector constant the kernel's header defines, naming the contract a call delivers."""

    name = "v8.selector"

    constant: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return [StringAttr(parser.parse_str_literal())]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_string_literal(self.constant.data)
        printer.print_string(">")


@irdl_attr_definition
class NullAttr(ParametrizedAttribute):
    """The null pointer: an optional buffer the op does not have (a projection's bias)."""

    name = "v8.null"


# ---- ops -----------------------------------------------------------------------------------


class EntryValue(StrEnum):
    """The entry point's parameters besides the buffers (named as in the C signature)."""

    POOL = "pool"
    N_PAST = "n_past"
    N_TOKENS = "n_tokens"
    SCRATCH = "scratch"
    SCRATCH_BYTES = "scratch_bytes"


ENTRY_TYPES: dict[EntryValue, Attribute] = {
    EntryValue.POOL: ThreadpoolType(), EntryValue.N_PAST: i64, EntryValue.N_TOKENS: i64,
    EntryValue.SCRATCH: PtrType(NoneType()), EntryValue.SCRATCH_BYTES: IndexType()}


@irdl_attr_definition
class EntryValueAttr(EnumAttribute[EntryValue], SpacedOpaqueSyntaxAttribute):
    name = "v8.entry_value_kind"


@irdl_op_definition
class EntryValueOp(IRDLOperation):
    """One of the entry point's own parameters."""

    name = "v8.entry_value"

    value = prop_def(EntryValueAttr)
    result = result_def()

    assembly_format = "$value attr-dict `:` type($result)"

    def __init__(self, value: EntryValue) -> None:
        super().__init__(properties={"value": EntryValueAttr(value)}, result_types=[ENTRY_TYPES[value]])

    @property
    def entry(self) -> EntryValue:
        return self.value.data

    def verify_(self) -> None:
        if self.result.type != ENTRY_TYPES[self.entry]:
            raise VerifyException(f"'{self.entry}' has type {ENTRY_TYPES[self.entry]}, not {self.result.type}")


@irdl_op_definition
class WorkersOp(IRDLOperation):
    """The worker count of a threadpool."""

    name = "v8.workers"

    pool = operand_def(ThreadpoolType)
    result = result_def(IntegerType)

    assembly_format = "$pool attr-dict `:` type($result)"

    def __init__(self, pool: SSAValue) -> None:
        super().__init__(operands=[pool], result_types=[i64])


@irdl_op_definition
class RequireOp(IRDLOperation):
    """A condition on the entry point's arguments, checked before any kernel runs."""

    name = "v8.require"

    condition = operand_def(IntegerType(1))

    assembly_format = "$condition attr-dict"

    def __init__(self, condition: SSAValue) -> None:
        super().__init__(operands=[condition])


def check_args(op: IRDLOperation, args: ArrayAttr[Attribute], values: Sequence[SSAValue]) -> None:
    """Each argument is an `index` naming operand #i or a typed constant."""
    for arg in args.data:
        match arg:
            case IntegerAttr(type=IndexType()):
                if not 0 <= arg.value.data < len(values):
                    raise VerifyException(f"argument refers to operand #{arg.value.data}, "
                                          f"but '{op.name}' has {len(values)}")
            case IntegerAttr() | FloatAttr() | DenseArrayBase() | SelectorAttr() | NullAttr():
                pass
            case _:
                raise VerifyException(f"unsupported call argument {arg}")


@irdl_op_definition
class ScratchNeedOp(IRDLOperation):
    """A kernel's scratch size: its map's scratch function called with these arguments."""

    name = "v8.scratch_need"

    function = prop_def(StringAttr)
    args = prop_def(ArrayAttr)
    values = var_operand_def()

    assembly_format = "$function `(` $values `)` `args` $args attr-dict `:` type($values)"

    def verify_(self) -> None:
        check_args(self, self.args, self.values)


@irdl_op_definition
class KernelDeclOp(IRDLOperation):
    """The C function a call binds, with its kernel map's ABI as the signature."""

    name = "v8.kernel_decl"

    sym_name = prop_def(SymbolNameConstraint())
    function_type = prop_def(FunctionType)
    arg_names = prop_def(ArrayAttr[StringAttr])
    kernel = prop_def(StringAttr)
    header = prop_def(StringAttr)

    traits = traits_def(SymbolOpInterface())

    assembly_format = (
        "$sym_name $function_type `names` $arg_names `kernel` $kernel `header` $header attr-dict"
    )

    def verify_(self) -> None:
        if len(self.arg_names.data) != len(self.function_type.inputs.data):
            raise VerifyException(f"{len(self.function_type.inputs.data)} parameters but "
                                  f"{len(self.arg_names.data)} names")
        if tuple(self.function_type.outputs.data) != (StatusType(),):
            raise VerifyException("a kernel returns !v8.status")


CALL_READY_OPS = [EntryValueOp, WorkersOp, RequireOp, ScratchNeedOp, KernelDeclOp]
CALL_READY_ATTRIBUTES = [ThreadpoolType, StatusType, PtrType, SelectorAttr, NullAttr, EntryValueAttr]


# ---- calls against their declarations ------------------------------------------------------


def _category(attr: Attribute) -> str:
    match attr:
        case PtrType() | NullAttr() | DenseArrayBase() | MemRefType():
            return "pointer"
        case ThreadpoolType():
            return "threadpool"
        case FloatAttr() | Float32Type():
            return "float"
        case IntegerAttr() | SelectorAttr() | IntegerType() | IndexType():
            return "integer"
        case _:
            return str(attr)


def signature_problems(args: Sequence[Attribute], values: Sequence[SSAValue], decl: KernelDeclOp) -> list[str]:
    """Where a call's arguments do not fit its declaration: their count, and each argument's
    kind (pointer, threadpool, integer, float) against the declared parameter's."""
    params = decl.function_type.inputs.data
    if len(args) != len(params):
        return [f"passes {len(args)} arguments but '{decl.sym_name.data}' takes {len(params)}"]
    problems: list[str] = []
    for i, (arg, param, name) in enumerate(zip(args, params, decl.arg_names.data, strict=True)):
        given: Attribute = arg
        if isinstance(arg, IntegerAttr) and isinstance(cast(IntegerAttr[IndexType | IntegerType], arg).type,
                                                       IndexType):
            given = values[arg.value.data].type
        if _category(given) != _category(param):
            problems.append(f"argument {i + 1} ('{name.data}') is {given}, but "
                            f"'{decl.sym_name.data}' takes {param}")
    return problems
