"""Contract attributes: the arithmetic an op requires, every field printed.

``#v8.partition`` says how work splits and what that does to the order of a reduction;
the attention, linear and decoder-op contracts state a complete numerical contract each
(their fields are the vocabularies of ``vocab``), and the two composites pick one of two
contracts by a declared threshold.  The syntax is ``KeywordAttribute``'s
(``v8dialect.ir.keyword_syntax``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from v8dialect.data import vocab
from v8dialect.ir.keyword_syntax import FieldKind, Integer, KeywordAttribute, Nested, Word, Words

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
