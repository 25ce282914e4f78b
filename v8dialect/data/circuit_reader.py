"""Reading a circuit's JSON into the data model of ``circuit_model``.

Reading is strict: closed vocabularies, unknown fields rejected, errors name the
file and the JSON path; every op kind's fields come from its ``OpKind``
(``v8dialect.ops.registry``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from v8dialect.data import vocab
from v8dialect.data.circuit_model import (
    DEFAULT_PREFIX,
    SELECTOR_VALUES,
    Choice,
    Circuit,
    LayerPattern,
    OpTemplate,
    OutputRows,
)
from v8dialect.data.contracts import parse_contract_id
from v8dialect.data.jsondata import Node
from v8dialect.data.manifest import FIELDS as MANIFEST_FIELDS
from v8dialect.data.manifest import INTS, ManifestError, ManifestValue, convert
from v8dialect.ops.registry import OP_KINDS

SCHEMA = "v8.circuit/1"
CIRCUIT_KINDS = ("decoder", "encoder")
INPUT_KINDS = ("tokens", "embeddings")
WEIGHT_TYING = ("optional", "always", "never")
MASKS = ("causal", "full")
SCALE_KINDS = ("sqrt",)  # an embedding's output scale
FACTOR_KINDS = ("inverse_sqrt",)  # a scale op's factor

# Op kinds a circuit may declare before the IR or the registries can express
# them: validation reports each as a gap (never a vocabulary error), so the
# circuit can be written down completely today.
PLANNED_OPS: tuple[str, ...] = ()
# Kinds with a contract family but no GraphIR op yet.
NO_GRAPH_OP: tuple[str, ...] = ()
CIRCUIT_OPS = (*(k for k, kind in OP_KINDS.items() if kind.circuit_fields), *PLANNED_OPS)

OP_COMMON = ("op", "inputs", "output")
OP_OPTIONAL = ("only", "notes", "status")
# Fields of a planned kind (one the IR cannot express yet), beyond the common ones.
PLANNED_FIELDS = (("node", "contracts"), ("weight", "bias", "eps", "tensors", "part", "parts"))


def op_fields(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """A circuit op kind's (required, optional) fields beyond the common ones; None: no circuit
    op has this kind (it is built by another, as attention builds its KV-cache stores)."""
    if kind in PLANNED_OPS:
        return PLANNED_FIELDS
    found = OP_KINDS.get(kind)
    return None if found is None else found.circuit_fields


NODE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
TENSOR_PATTERN = re.compile(r"^[a-z][a-z0-9_.]*$")


# ---- parsing ---------------------------------------------------------------------------


def _manifest_field(node: Node) -> str:
    return node.word(tuple(MANIFEST_FIELDS))


def _tensor_stem(node: Node) -> str:
    text = node.string()
    if not TENSOR_PATTERN.match(text):
        raise node.error(
            f"'{text}' is not a tensor name stem (lower-case words joined by '_' or '.')"
        )
    return text


def _choice(node: Node, kind: str) -> Choice:
    if isinstance(node.value, str):
        return Choice(parse_contract_id(node), path=node.path)
    node.object(["contract"], ["when", "execution", "layout"])
    when: tuple[tuple[str, str], ...] = ()
    if node.has("when"):
        when_node = node.child("when")
        when_node.object([], tuple(SELECTOR_VALUES))
        when = tuple(sorted((k, v.word(SELECTOR_VALUES[k])) for k, v in when_node.entries()))
        if not when:
            raise when_node.error("a selector needs at least one condition")
        if any(k == "weight_type" for k, _ in when) and kind not in (
            "linear",
            "logits",
            "embedding",
        ):
            raise when_node.error(
                f"'weight_type' selects only on ops with one weight, not '{kind}'"
            )
    execution = None
    if node.has("execution"):
        ex = node.child("execution").object(["runtime", "partition"])
        execution = (
            ex.child("runtime").word(vocab.THREADING_RUNTIMES),
            ex.child("partition").word(vocab.WORK_PARTITIONS),
        )
    layout = node.child("layout").word(tuple(vocab.PREPARED_LAYOUTS)) if node.has("layout") else None
    if layout is not None and kind not in ("linear", "logits"):
        raise node.child("layout").error(f"a prepared weight layout is read by linear and logits ops, "
                                         f"not '{kind}'")
    return Choice(parse_contract_id(node.child("contract")), when, execution, node.path, layout)


def _choices(node: Node, kind: str) -> tuple[Choice, ...]:
    if isinstance(node.value, list):
        choices = tuple(_choice(item, kind) for item in node.items())
        if not choices:
            raise node.error("expected at least one alternative")
        if any(not c.when for c in choices) and len(choices) > 1:
            raise node.error("with several alternatives, every one needs a 'when'")
        seen: dict[tuple[tuple[str, str], ...], str] = {}
        for choice in choices:
            if choice.when in seen:
                raise node.error(
                    f"alternatives {seen[choice.when]} and {choice.path} have the same "
                    "'when': at most one requirement may be active"
                )
            seen[choice.when] = choice.path
        return choices
    return (_choice(node, kind),)


def _contracts(node: Node, phases: Sequence[str], kind: str) -> dict[str, tuple[Choice, ...]]:
    node.object(phases)
    return {phase: _choices(node.child(phase), kind) for phase in phases}


def _kind_of_field(node: Node, kinds: Sequence[str]) -> tuple[str, str]:
    """{"<kind>": "<manifest field>"} with exactly one of `kinds`, e.g. {"sqrt": "width"}."""
    node.object([], kinds)
    entries = list(node.entries())
    if len(entries) != 1:
        raise node.error(f"expected exactly one of: {', '.join(kinds)}")
    kind, value = entries[0]
    return kind, _manifest_field(value)


def _weight_offset(node: Node) -> dict[str, float]:
    node.object(["config", "gguf"])
    offsets: dict[str, float] = {}
    for source, child in node.entries():
        if isinstance(child.value, bool) or not isinstance(child.value, int | float):
            raise child.error("expected a number")
        offsets[source] = float(child.value)
    return offsets


@dataclass(frozen=True)
class Scope:
    """What every op of one circuit is parsed against."""

    positions: Mapping[str, tuple[int, int]]
    phases: tuple[str, ...]
    layer_kinds: tuple[str, ...]
    status: str
    requirements: Node | None  # the circuit's shared requirement sets, by name


def _op_contracts(node: Node, scope: Scope, kind: str) -> dict[str, tuple[Choice, ...]]:
    """Per-phase choices written on the op, or a named set from the circuit's 'requirements'."""
    if not isinstance(node.value, str):
        return _contracts(node, scope.phases, kind)
    name = node.value
    if scope.requirements is None or not scope.requirements.has(name):
        known = (
            ", ".join(k for k, _ in scope.requirements.entries()) if scope.requirements else "none"
        )
        raise node.error(f"no requirement set '{name}' in $.requirements (defined: {known})")
    return _contracts(scope.requirements.child(name), scope.phases, kind)


def parse_op(node: Node, scope: Scope) -> OpTemplate:
    kind = node.child("op").word(CIRCUIT_OPS) if node.has("op") else None
    if kind is None:
        every = [op_fields(k) for k in CIRCUIT_OPS]
        node.object(OP_COMMON, [f for fs in every if fs for f in (*fs[0], *fs[1])] + list(OP_OPTIONAL))
        raise node.error("missing field 'op'")
    fields = op_fields(kind)
    assert fields is not None  # CIRCUIT_OPS holds the kinds with circuit fields
    required, optional = fields
    node.object([*OP_COMMON, *required], [*OP_OPTIONAL, *optional])
    inputs = node.child("inputs").strings(nonempty=True)
    found = OP_KINDS.get(kind)
    arity = None if found is None else found.arity
    if arity is not None and len(inputs) != arity:
        raise node.child("inputs").error(f"'{kind}' takes {arity} input(s), got {len(inputs)}")
    line, column = scope.positions.get(node.path, (1, 1))
    get = node.child
    has = node.has
    template = OpTemplate(
        kind=kind,
        inputs=inputs,
        output=get("output").string(),
        path=node.path,
        line=line,
        column=column,
        status=get("status").word(vocab.STATUSES) if has("status") else scope.status,
        node=_node_name(get("node")) if has("node") else "",
        only=get("only").strings(scope.layer_kinds) if has("only") else (),
        contracts=_op_contracts(get("contracts"), scope, kind) if has("contracts") else {},
        weight=_tensor_stem(get("weight")) if has("weight") else None,
        bias=_tensor_stem(get("bias")) if has("bias") else None,
        tied_to=_tensor_stem(get("tied_to")) if has("tied_to") else None,
        features=tuple(_feature(n) for n in get("features").items()) if has("features") else (),
        eps=_manifest_field(get("eps")) if has("eps") else None,
        weight_offset=_weight_offset(get("weight_offset")) if has("weight_offset") else {},
        output_scale=(
            _kind_of_field(get("output_scale"), SCALE_KINDS) if has("output_scale") else None
        ),
        heads=_manifest_field(get("heads")) if has("heads") else None,
        flatten=_flag(get("flatten")) if has("flatten") else False,
        freq_base=_manifest_field(get("freq_base")) if has("freq_base") else None,
        dims=_manifest_field(get("dims")) if has("dims") else None,
        sections=_manifest_field(get("sections")) if has("sections") else None,
        mask=get("mask").word(MASKS) if has("mask") else None,
        scale=_inverse_scale(get("scale")) if has("scale") else None,
        factor=_kind_of_field(get("factor"), FACTOR_KINDS) if has("factor") else None,
        kv_heads=_manifest_field(get("kv_heads")) if has("kv_heads") else None,
        window=_manifest_field(get("window")) if has("window") else None,
        tensors=tuple(_tensor_stem(n) for n in get("tensors").items()) if has("tensors") else (),
        part=get("part").integer(minimum=0) if has("part") else None,
        parts=get("parts").integer(minimum=1) if has("parts") else None,
    )
    _check_op(template, node)
    return template


def _feature(node: Node) -> str | int | tuple[str | int, ...]:
    """A factor of an output dimension: a manifest field, or a constant such as 2 (q and gate);
    a list is one term of a sum of products."""
    if isinstance(node.value, list):
        term = tuple(_factor(n) for n in node.items())
        if not term or any(isinstance(f, tuple) for f in term):
            raise node.error("a sum term is a non-empty list of manifest fields and constants")
        return term  # type: ignore[return-value]
    return _factor(node)


def _factor(node: Node) -> str | int:
    return node.integer(minimum=1) if isinstance(node.value, int) else _manifest_field(node)


def _node_name(node: Node) -> str:
    text = node.string()
    if not NODE_PATTERN.match(text):
        raise node.error(f"'{text}' is not a node name (lower_snake_case)")
    return text


def _flag(node: Node) -> bool:
    if not isinstance(node.value, bool):
        raise node.error("expected true or false")
    return node.value


def _inverse_scale(node: Node) -> tuple[str, str]:
    node.object(["inverse_sqrt"])
    return "inverse_sqrt", _manifest_field(node.child("inverse_sqrt"))


def _check_op(op: OpTemplate, node: Node) -> None:
    if op.kind == "reshape" and (op.heads is None) == (not op.flatten):
        raise node.error("a reshape names either 'heads' (split the last dim) or 'flatten': true")
    if op.kind in ("linear", "logits") and not op.features:
        raise node.child("features").error("expected a non-empty list of manifest fields")
    if op.part is not None and op.parts is not None and op.part >= op.parts:
        raise node.child("part").error(f"part {op.part} of {op.parts} does not exist")
    if op.sections is not None and MANIFEST_FIELDS[op.sections].kind != INTS:
        raise node.child("sections").error(f"'{op.sections}' is not a list-valued manifest field")


def _layers(node: Node) -> LayerPattern:
    node.object(["kinds"], ["every", "at_end_of_period"])
    kinds = node.child("kinds").strings()
    for kind in kinds:
        if not NODE_PATTERN.match(kind):
            raise node.child("kinds").error(f"'{kind}' is not a layer kind name (lower_snake_case)")
    if not node.has("every"):
        if len(kinds) != 1:
            raise node.child("kinds").error(
                "several layer kinds need 'every' and 'at_end_of_period'"
            )
        return LayerPattern(kinds)
    if len(kinds) != 2 or not node.has("at_end_of_period"):
        raise node.error("a periodic pattern names two kinds, 'every' and 'at_end_of_period'")
    return LayerPattern(
        kinds, _manifest_field(node.child("every")), node.child("at_end_of_period").word(kinds)
    )


def _defaults(node: Node) -> dict[str, ManifestValue]:
    node.object([], tuple(MANIFEST_FIELDS))
    values: dict[str, ManifestValue] = {}
    for name, child in node.entries():
        try:
            values[name] = convert(name, child.value, child.path)
        except ManifestError as e:
            raise child.error(str(e).removeprefix(f"{child.path}: ")) from None
    return values


def _ops(node: Node, scope: Scope) -> tuple[OpTemplate, ...]:
    return tuple(parse_op(item, scope) for item in node.items())


TOP_REQUIRED = (
    "schema",
    "family",
    "description",
    "kind",
    "status",
    "input",
    "architectures",
    "manifest",
    "layers",
    "prologue",
    "block",
    "epilogue",
    "result",
)
MANIFEST_KEYS = ("required",)
MANIFEST_OPTIONAL = ("defaults", "key_prefix", "config_section", "match", "weight_tying")


def parse_circuit(doc: Node, positions: Mapping[str, tuple[int, int]]) -> Circuit:
    doc.object(TOP_REQUIRED, ["notes", "requirements", "tensor_prefix", "output_rows"])
    schema = doc.child("schema")
    if schema.string() != SCHEMA:
        raise schema.error(f"unsupported schema '{schema.value}' (expected '{SCHEMA}')")
    family = _node_name(doc.child("family"))
    kind = doc.child("kind").word(CIRCUIT_KINDS)
    phases = vocab.PHASES if kind == "decoder" else ("prefill",)
    status = doc.child("status").word(vocab.STATUSES)
    manifest = doc.child("manifest").object(MANIFEST_KEYS, MANIFEST_OPTIONAL)
    layers = _layers(doc.child("layers"))
    requirements = doc.child("requirements") if doc.has("requirements") else None
    if requirements is not None:
        requirements.object([], [k for k, _ in requirements.entries()])
    scope = Scope(positions, phases, layers.kinds, status, requirements)
    ops = {
        section: _ops(doc.child(section), scope) for section in ("prologue", "block", "epilogue")
    }
    prefix = (
        _tensor_prefix(doc.child("tensor_prefix")) if doc.has("tensor_prefix") else DEFAULT_PREFIX
    )
    return Circuit(
        family=family,
        kind=kind,
        file=str(doc.file),
        description=doc.child("description").string(),
        status=status,
        input=doc.child("input").word(INPUT_KINDS),
        architectures=doc.child("architectures").strings(),
        key_prefix=manifest.child("key_prefix").string() if manifest.has("key_prefix") else None,
        config_section=(
            manifest.child("config_section").string() if manifest.has("config_section") else None
        ),
        match=_match(manifest.child("match")) if manifest.has("match") else {},
        required=manifest.child("required").strings(tuple(MANIFEST_FIELDS)),
        defaults=_defaults(manifest.child("defaults")) if manifest.has("defaults") else {},
        weight_tying=(
            manifest.child("weight_tying").word(WEIGHT_TYING)
            if manifest.has("weight_tying")
            else "never"
        ),
        layers=layers,
        prologue=ops["prologue"],
        block=ops["block"],
        epilogue=ops["epilogue"],
        result=doc.child("result").string(),
        output_rows=(_output_rows(doc.child("output_rows"), ops["block"], ops["epilogue"])
                     if doc.has("output_rows") else None),
        block_prefix=prefix[0],
        global_prefix=prefix[1],
    )


def _output_rows(node: Node, block: tuple[OpTemplate, ...],
                 epilogue: tuple[OpTemplate, ...]) -> OutputRows:
    """`after` is a node of the block or of the epilogue; each selected name is a value an op
    after it (in the same section) reads."""
    node.object(["after", "select"])
    after = node.child("after").string()
    in_epilogue = after in [op.node for op in epilogue]
    section = epilogue if in_epilogue else block
    nodes = [op.node for op in section]
    if after not in nodes:
        raise node.child("after").error(f"'{after}' is no node of the block or the epilogue")
    later = {name for op in section[nodes.index(after) + 1:] for name in op.inputs}
    select = node.child("select").strings()
    for i, name in enumerate(select):
        if name not in later:
            raise node.child("select").child(i).error(
                f"no op after '{after}' reads '{name}', so selecting its rows changes nothing")
    return OutputRows(after, select, in_epilogue)


def _tensor_prefix(node: Node) -> tuple[str, str]:
    node.object(["block", "global"])
    block = node.child("block").string()
    if "{layer}" not in block:
        raise node.child("block").error("the block prefix must contain '{layer}'")
    return block, node.child("global").string()


def _match(node: Node) -> dict[str, str]:
    if not isinstance(node.value, dict):
        raise node.error("expected an object of metadata key -> required string value")
    return {key: child.string() for key, child in node.entries()}
