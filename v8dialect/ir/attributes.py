"""Attributes and types of the v8 dialect.

Contracts are typed attributes whose every field prints, so a reader of the
IR sees the arithmetic and not just an id.  Field values come from the closed
vocabularies in ``vocab`` (shared with the JSON registries); the syntax is

    #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, ...,
                           partition = #v8.partition<kv_chunks_by_workers, ...>>

Keyword fields may appear in any order when parsing, print in declaration
order, and are all required; unknown, duplicate and missing fields are parse
errors located at the attribute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
)
from xdsl.dialects.utils.enum_attribute import EnumAttribute
from xdsl.ir import Attribute, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from v8dialect.data import vocab
from v8dialect.ir.narrowing import array_items, int_data

# ---- enums -----------------------------------------------------------------


class Phase(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@irdl_attr_definition
class PhaseAttr(EnumAttribute[Phase], SpacedOpaqueSyntaxAttribute):
    name = "v8.phase"


class Mask(StrEnum):
    CAUSAL = "causal"
    FULL = "full"


@irdl_attr_definition
class MaskAttr(EnumAttribute[Mask], SpacedOpaqueSyntaxAttribute):
    name = "v8.mask"


# ---- quantized element types -----------------------------------------------


@irdl_attr_definition
class Q4KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_K: 256 weights in 144 bytes (fp16 d, dmin; 6-bit scales/mins; nibbles)."""

    name = "v8.q4_k"


@irdl_attr_definition
class Q6KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q6_K: 256 weights in 210 bytes (low nibbles, high bit pairs, int8 scales, fp16 d)."""

    name = "v8.q6_k"


@irdl_attr_definition
class Q5KType(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_K: 256 weights in 176 bytes (fp16 d, dmin; 6-bit scales/mins; nibbles; fifth bits)."""

    name = "v8.q5_k"


@irdl_attr_definition
class Q80Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q8_0: 32 weights in 34 bytes (fp16 d, 32 int8 levels)."""

    name = "v8.q8_0"


@irdl_attr_definition
class Q50Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_0: 32 weights in 22 bytes (fp16 d, 32 fifth bits, 16 bytes of nibbles)."""

    name = "v8.q5_0"


@irdl_attr_definition
class Q40Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_0: 32 weights in 18 bytes (fp16 d, 16 bytes of nibbles)."""

    name = "v8.q4_0"


@irdl_attr_definition
class Q41Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q4_1: 32 weights in 20 bytes (fp16 d and min m, 16 bytes of nibbles)."""

    name = "v8.q4_1"


@irdl_attr_definition
class Q51Type(ParametrizedAttribute, TypeAttribute):
    """ggml Q5_1: 32 weights in 24 bytes (fp16 d and min m, 32 fifth bits, 16 bytes of nibbles)."""

    name = "v8.q5_1"


# ---- keyword-field syntax --------------------------------------------------


class FieldKind(ABC):
    """How one keyword field parses, prints and verifies."""

    @abstractmethod
    def parse(self, parser: AttrParser) -> Attribute: ...

    @abstractmethod
    def print(self, printer: Printer, value: Attribute) -> None: ...

    def check(self, key: str, value: Attribute) -> None:  # noqa: B027 - most kinds accept any value
        """Raise VerifyException when value is not legal for this field."""


@dataclass(frozen=True)
class Word(FieldKind):
    """A bare identifier from a closed vocabulary."""

    words: tuple[str, ...]

    def parse(self, parser: AttrParser) -> Attribute:
        return StringAttr(parser.parse_identifier())

    def print(self, printer: Printer, value: Attribute) -> None:
        assert isinstance(value, StringAttr)
        printer.print_string(value.data)

    def check(self, key: str, value: Attribute) -> None:
        if not isinstance(value, StringAttr) or value.data not in self.words:
            shown = value.data if isinstance(value, StringAttr) else str(value)
            raise VerifyException(f"{key} = {shown} is not one of: {', '.join(self.words)}")


@dataclass(frozen=True)
class Words(FieldKind):
    """A bracketed list of identifiers from a closed vocabulary: [a, b]."""

    words: tuple[str, ...]

    def parse(self, parser: AttrParser) -> Attribute:
        items = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: StringAttr(parser.parse_identifier())
        )
        return ArrayAttr(items)

    def print(self, printer: Printer, value: Attribute) -> None:
        items = array_items(value)
        assert items is not None
        printer.print_string("[" + ", ".join(s.data for s in _strings(items)) + "]")

    def check(self, key: str, value: Attribute) -> None:
        items = array_items(value)
        if items is None:
            raise VerifyException(f"{key} must be a list")
        for item in _strings(items):
            Word(self.words).check(key, item)


class Text(FieldKind):
    """A string literal (function and kernel names)."""

    def parse(self, parser: AttrParser) -> Attribute:
        return StringAttr(parser.parse_str_literal())

    def print(self, printer: Printer, value: Attribute) -> None:
        assert isinstance(value, StringAttr)
        printer.print_string_literal(value.data)


class Integer(FieldKind):
    def parse(self, parser: AttrParser) -> Attribute:
        return IntAttr(parser.parse_integer(allow_negative=False))

    def print(self, printer: Printer, value: Attribute) -> None:
        number = int_data(value)
        assert number is not None
        printer.print_string(str(number))


@dataclass(frozen=True)
class Nested(FieldKind):
    """A nested v8 attribute, printed qualified."""

    kinds: tuple[type[Attribute], ...]

    def parse(self, parser: AttrParser) -> Attribute:
        return parser.parse_attribute()

    def print(self, printer: Printer, value: Attribute) -> None:
        printer.print_attribute(value)

    def check(self, key: str, value: Attribute) -> None:
        if not isinstance(value, self.kinds):
            names = " or ".join(f"#{k.name}" for k in self.kinds)  # pyright: ignore
            raise VerifyException(f"{key} must be {names}")


def _strings(items: tuple[Attribute, ...]) -> list[StringAttr]:
    return [s for s in items if isinstance(s, StringAttr)]


class KeywordAttribute(ParametrizedAttribute):
    """Syntax <"lead", key = value, ...> for attributes with named fields.

    Subclasses declare their parameters as annotated fields (a leading
    ``StringAttr`` when ``LEAD`` is set, then one per key in ``FIELDS``) in
    the same order as ``FIELDS``.
    """

    LEAD: ClassVar[str | None] = None  # name of a leading string-literal parameter
    FIELDS: ClassVar[Mapping[str, FieldKind]]

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            lead: list[Attribute] = [StringAttr(parser.parse_str_literal())] if cls.LEAD else []
            values = cls._parse_fields(parser, need_comma=bool(cls.LEAD))
        missing = [k for k in cls.FIELDS if k not in values]
        if missing:
            parser.raise_error(f"#{cls.name} is missing field '{missing[0]}'", start, parser.pos)
        params = lead + [values[k] for k in cls.FIELDS]
        try:
            cls.new(params)
        except VerifyException as e:
            parser.raise_error(str(e), start, parser.pos)
        return params

    @classmethod
    def _parse_fields(cls, parser: AttrParser, need_comma: bool) -> dict[str, Attribute]:
        values: dict[str, Attribute] = {}
        while not need_comma or parser.parse_optional_punctuation(","):
            need_comma = True
            key_start = parser.pos
            key = parser.parse_identifier()
            if key not in cls.FIELDS:
                parser.raise_error(
                    f"unknown field '{key}' in #{cls.name} (fields: {', '.join(cls.FIELDS)})",
                    key_start, parser.pos,
                )
            if key in values:
                parser.raise_error(f"duplicate field '{key}' in #{cls.name}", key_start, parser.pos)
            parser.parse_punctuation("=")
            value_start = parser.pos
            values[key] = cls.FIELDS[key].parse(parser)
            try:
                cls.FIELDS[key].check(key, values[key])
            except VerifyException as e:
                parser.raise_error(str(e), value_start, parser.pos)
        return values

    def print_parameters(self, printer: Printer) -> None:
        params = list(self.parameters)
        printer.print_string("<")
        if self.LEAD:
            lead = params.pop(0)
            assert isinstance(lead, StringAttr)
            printer.print_string_literal(lead.data)
        for i, (key, kind) in enumerate(self.FIELDS.items()):
            if i or self.LEAD:
                printer.print_string(", ")
            printer.print_string(f"{key} = ")
            kind.print(printer, params[i])
        printer.print_string(">")

    def verify(self) -> None:
        params = list(self.parameters)
        if self.LEAD:
            params.pop(0)
        for (key, kind), value in zip(self.FIELDS.items(), params, strict=True):
            kind.check(key, value)

    @property
    def lead(self) -> str:
        """The leading string literal (contract id, requirement source)."""
        assert self.LEAD is not None
        value = self.parameters[0]
        assert isinstance(value, StringAttr)
        return value.data

    def field(self, key: str) -> Attribute:
        offset = 1 if self.LEAD else 0
        return self.parameters[offset + list(self.FIELDS).index(key)]

    def word(self, key: str) -> str:
        value = self.field(key)
        assert isinstance(value, StringAttr)
        return value.data


# ---- partition ---------------------------------------------------------------


@irdl_attr_definition
class PartitionAttr(ParametrizedAttribute):
    """#v8.partition<kind, effect = e, param = v, ...>: how work splits and what that does to order."""

    name = "v8.partition"

    kind: StringAttr
    effect: StringAttr
    params: DictionaryAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            kind = StringAttr(parser.parse_identifier())
            parser.parse_punctuation(",")
            parser.parse_keyword("effect")
            parser.parse_punctuation("=")
            effect = StringAttr(parser.parse_identifier())
            params: dict[str, Attribute] = {}
            while parser.parse_optional_punctuation(","):
                key_start = parser.pos
                key = parser.parse_identifier()
                if key in params:
                    parser.raise_error(f"duplicate partition parameter '{key}'", key_start, parser.pos)
                parser.parse_punctuation("=")
                number = parser.parse_optional_integer(allow_negative=False)
                params[key] = (
                    IntegerAttr(number, 64)
                    if number is not None
                    else StringAttr(parser.parse_identifier())
                )
        values: list[Attribute] = [kind, effect, DictionaryAttr(params)]
        try:
            cls.new(values)
        except VerifyException as e:
            parser.raise_error(str(e), start, parser.pos)
        return values

    def print_parameters(self, printer: Printer) -> None:
        parts = [self.kind.data, f"effect = {self.effect.data}"]
        parts += [f"{k} = {_param_text(v)}" for k, v in sorted(self.params.data.items())]
        printer.print_string("<" + ", ".join(parts) + ">")

    def verify(self) -> None:
        kind = self.kind.data
        if kind not in vocab.PARTITION_KINDS:
            raise VerifyException(
                f"unknown partition kind '{kind}' (kinds: {', '.join(vocab.PARTITION_KINDS)})"
            )
        expected = vocab.expected_effect(kind)
        if self.effect.data != expected:
            raise VerifyException(
                f"partition '{kind}' must declare effect = {expected}, not {self.effect.data}"
            )
        allowed = vocab.PARTITION_KINDS[kind][1]
        given = frozenset(self.params.data)
        if given != allowed:
            extra = sorted(given - allowed)
            missing = sorted(allowed - given)
            detail = f"unexpected '{extra[0]}'" if extra else f"missing '{missing[0]}'"
            raise VerifyException(f"partition '{kind}' parameters: {detail}")
        for key, value in self.params.data.items():
            _check_partition_param(key, value)

    def param_values(self) -> tuple[tuple[str, int | str], ...]:
        return tuple(sorted((k, _param_value(v)) for k, v in self.params.data.items()))


def _param_value(value: Attribute) -> int | str:
    if isinstance(value, IntegerAttr):
        return value.value.data
    assert isinstance(value, StringAttr)
    return value.data


def _param_text(value: Attribute) -> str:
    return str(_param_value(value))


def _check_partition_param(key: str, value: Attribute) -> None:
    words = vocab.PARTITION_WORD_PARAMS.get(key)
    if words is not None:
        if not (isinstance(value, StringAttr) and value.data in words):
            raise VerifyException(f"partition parameter {key} must be one of: {', '.join(words)}")
    elif not (isinstance(value, IntegerAttr) and value.value.data >= 1):
        raise VerifyException(f"partition parameter {key} must be a positive integer")


# ---- contracts ---------------------------------------------------------------

_PARTITION_FIELD = Nested((PartitionAttr,))


def _words(spec: Mapping[str, tuple[str, ...]]) -> dict[str, FieldKind]:
    return {name: Word(values) for name, values in spec.items()}


class ContractAttr(KeywordAttribute):
    """Common ground of every contract attribute: an id and the arithmetic."""

    LEAD = "contract_id"

    @property
    def id(self) -> str:
        return self.lead

    def verify(self) -> None:
        problem = vocab.loose_id_problem(self.id)
        if problem:
            raise VerifyException(problem)
        super().verify()


@irdl_attr_definition
class AttentionContractAttr(ContractAttr):
    """A complete attention reduction: precisions, accumulators, partials, merge, partition."""

    name = "v8.attention_contract"
    FIELDS = {**_words(vocab.ATTENTION_FIELDS), "partition": _PARTITION_FIELD}

    contract_id: StringAttr
    q_compute: StringAttr
    k_compute: StringAttr
    score_accumulator: StringAttr
    dot_order: StringAttr
    scale_application: StringAttr
    softmax_statistics: StringAttr
    exp_function: StringAttr
    probability_rounding: StringAttr
    value_compute: StringAttr
    value_accumulator: StringAttr
    partial_storage: StringAttr
    partial_merge: StringAttr
    normalization: StringAttr
    output_rounding: StringAttr
    partition: PartitionAttr


@irdl_attr_definition
class LinearContractAttr(ContractAttr):
    """A complete quantized dot product: formats, integer/float accumulators, lanes, order."""

    name = "v8.linear_contract"
    FIELDS = {**_words(vocab.LINEAR_FIELDS), "partition": _PARTITION_FIELD}

    contract_id: StringAttr
    weight_format: StringAttr
    activation_format: StringAttr
    activation_quantizer: StringAttr
    integer_accumulator: StringAttr
    float_accumulator: StringAttr
    min_correction: StringAttr
    super_block_order: StringAttr
    horizontal_order: StringAttr
    bias: StringAttr
    partial_accumulator: StringAttr
    merge_order: StringAttr
    partition: PartitionAttr


@irdl_attr_definition
class OpContractAttr(ContractAttr):
    """The numerical execution contract of a decoder op (norms, RoPE, gating, ...)."""

    name = "v8.op_contract"
    FIELDS = {
        "op": Word(vocab.DECODER_OPS),
        **_words(vocab.OP_FIELDS),
        "rounding_points": Words(vocab.ROUNDING_POINTS),
        "partition": _PARTITION_FIELD,
    }

    contract_id: StringAttr
    op: StringAttr
    storage: StringAttr
    compute: StringAttr
    reduction_kind: StringAttr
    reduction_accumulator: StringAttr
    reduction_order: StringAttr
    elementwise: StringAttr
    transcendentals: StringAttr
    rounding_points: ArrayAttr[StringAttr]
    partition: PartitionAttr


@irdl_attr_definition
class CompositeContractAttr(ContractAttr):
    """A contract that picks one of two attention contracts by a declared threshold."""

    name = "v8.composite_contract"
    FIELDS = {
        "selector": Word(vocab.COMPOSITE_SELECTORS),
        "threshold": Integer(),
        "head_dim_multiple_of": Integer(),
        "below": Nested((AttentionContractAttr,)),
        "at_or_above": Nested((AttentionContractAttr,)),
    }

    contract_id: StringAttr
    selector: StringAttr
    threshold: IntAttr
    head_dim_multiple_of: IntAttr
    below: AttentionContractAttr
    at_or_above: AttentionContractAttr


@irdl_attr_definition
class LinearCompositeContractAttr(ContractAttr):
    """A contract that picks one of two linear contracts by the activation rows of the call.

    Rows (``selector = query_batch``) below ``threshold`` run ``below``, the
    others ``at_or_above``; both parts read one weight format.
    """

    name = "v8.linear_composite_contract"
    FIELDS = {
        "selector": Word(vocab.COMPOSITE_SELECTORS),
        "threshold": Integer(),
        "below": Nested((LinearContractAttr,)),
        "at_or_above": Nested((LinearContractAttr,)),
    }

    contract_id: StringAttr
    selector: StringAttr
    threshold: IntAttr
    below: LinearContractAttr
    at_or_above: LinearContractAttr

    def verify(self) -> None:
        super().verify()
        formats = {part.word("weight_format") for part in (self.below, self.at_or_above)}
        if len(formats) != 1:
            raise VerifyException(
                f"composite '{self.id}' mixes weight formats: {', '.join(sorted(formats))}")

    @property
    def weight_format(self) -> str:
        return self.below.word("weight_format")


AnyContractAttr = (AttentionContractAttr | LinearContractAttr | OpContractAttr | CompositeContractAttr
                   | LinearCompositeContractAttr)

# ---- execution, requirement and resolution -----------------------------------


@irdl_attr_definition
class ExecutionRequirementAttr(KeywordAttribute):
    """What an op asks of threading: #v8.exec_requirement<runtime = threadpool, partition = ...>."""

    name = "v8.exec_requirement"
    FIELDS = {
        "runtime": Word(vocab.THREADING_RUNTIMES),
        "partition": Word(vocab.WORK_PARTITIONS),
    }

    runtime: StringAttr
    partition: StringAttr


@irdl_attr_definition
class ExecutionAttr(KeywordAttribute):
    """The resolved execution: ISA dispatch, threading runtime, partition, order effect."""

    name = "v8.execution"
    FIELDS = {
        "isa_dispatch": Word(vocab.ISA_DISPATCH_KINDS),
        "isa_variants": Words(vocab.ISA_VARIANTS),
        "runtime": Word(vocab.THREADING_RUNTIMES),
        "partition": Word(vocab.WORK_PARTITIONS),
        "reduction_order_effect": Word(vocab.REDUCTION_ORDER_EFFECTS),
    }

    isa_dispatch: StringAttr
    isa_variants: ArrayAttr[StringAttr]
    runtime: StringAttr
    partition: StringAttr
    reduction_order_effect: StringAttr


@irdl_attr_definition
class RequirementAttr(KeywordAttribute):
    """Where an op's contract requirement comes from (a circuit) and its status."""

    name = "v8.requirement"
    LEAD = "source"
    FIELDS = {"status": Word(vocab.STATUSES)}

    source: StringAttr
    status: StringAttr


NO_FUNCTION = ""


@irdl_attr_definition
class ResolvedAttr(KeywordAttribute):
    """The one provider resolve-contracts chose, pinned for every later stage.

    Function fields are "" when the map binds none (inline emission, or no
    threadpool).  ``blockers`` lists why the op could not run in production mode
    (statuses that are not validated); it is empty in production mode.
    """

    name = "v8.resolved"
    FIELDS = {
        "kernel": Text(),
        "contract": Text(),
        "selector": Text(),
        "emission": Word(vocab.EMISSIONS),
        "oracle": Text(),
        "production": Text(),
        "threadpool": Text(),
        "execution": Nested((ExecutionAttr,)),
        "blockers": Words(tuple(vocab.BLOCKERS)),
    }

    kernel: StringAttr
    contract: StringAttr
    selector: StringAttr
    emission: StringAttr
    oracle: StringAttr
    production: StringAttr
    threadpool: StringAttr
    execution: ExecutionAttr
    blockers: ArrayAttr[StringAttr]

    @property
    def calls_threadpool(self) -> bool:
        """Whether the call goes through the threadpool dispatch (vs the production function).

        A threadpool provider run under its 'serial' partition is called serially.
        """
        return (self.execution.word("runtime") == "threadpool"
                and self.execution.word("partition") != "serial")

    @property
    def callee(self) -> str:
        return self.word("threadpool" if self.calls_threadpool else "production")

    def summary(self) -> dict[str, str]:
        """The pinned identity later stages compare: kernel, functions, contract, execution."""
        fields = ("kernel", "contract", "selector", "emission", "oracle", "production", "threadpool")
        pinned = {key: self.word(key) for key in fields}
        pinned["execution"] = str(self.execution)
        return pinned


ATTRIBUTES: list[type[Attribute]] = [
    PhaseAttr,
    MaskAttr,
    Q4KType,
    Q6KType,
    Q5KType,
    Q80Type,
    Q50Type,
    Q40Type,
    Q41Type,
    Q51Type,
    PartitionAttr,
    AttentionContractAttr,
    LinearContractAttr,
    OpContractAttr,
    CompositeContractAttr,
    LinearCompositeContractAttr,
    ExecutionRequirementAttr,
    ExecutionAttr,
    RequirementAttr,
    ResolvedAttr,
]
