"""Circuits: a model family's graph template and the contracts each op requires.

A circuit (``circuits/<family>.json``, schema ``v8.circuit/1``, described in
``circuits/README.md``) lists the ops of the prologue, of one block (per layer
kind) and of the epilogue, their dataflow by value name, the manifest fields
that size them, and per op and phase the contract it requires — directly, or
chosen by selectors on manifest values (``kv_cache_dtype``, the op's
``weight_type``).  Circuits never name kernels.

Loading validates strictly (closed vocabularies, unknown fields rejected,
errors name file and JSON path) and then checks what a circuit needs from the
rest of the compiler: a contract the registry lacks, or an op kind the IR
cannot express yet, is a *gap*; every gap is reported together, so a circuit
written ahead of its contracts fails loudly instead of building half a model.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from v8dialect.data import vocab
from v8dialect.data.contracts import ContractRegistry
from v8dialect.data.jsondata import DataError, Node, utf8_problem
from v8dialect.data.manifest import FIELDS as MANIFEST_FIELDS
from v8dialect.data.manifest import INTS, ManifestError, ManifestValue, convert
from v8dialect.data.paths import circuits_dir
from v8dialect.ops.registry import OP_KINDS
from v8dialect.runtime.host import GGML_BUILDS, LOOP_VECTORS

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

# Selector keys and the values they compare against.
SELECTOR_VALUES: Mapping[str, tuple[str, ...]] = {
    "kv_cache_dtype": ("f32", "f16", "bf16"),
    "weight_type": vocab.DTYPES,
    # whose arithmetic the ops reproduce where engines differ: ggml's CPU backend (llama.cpp:
    # its vector exp, fp16 GELU table, 16-lane fp32 dots) or the portable contracts (one libm
    # call per element, ascending fp32 dots)
    "reference_arithmetic": ("ggml_cpu", "portable"),
    # how the reference engine holds weights: llama.cpp's CPU repack buffer (its default; Q4_K
    # and Q4_0 weights with a row count divisible by 8 go through its repacked GEMV/GEMM) or
    # plain GGUF blocks everywhere (llama.cpp with use_extra_bufts off)
    "weight_layout": ("ggml_repacked", "plain"),
    # which x86 build of llama.cpp's CPU backend: its fp32/fp16/bf16 mul_mat and its fused
    # recurrent chain accumulate in one vector register's lanes (16 with AVX-512, 8 with AVX2)
    "ggml_build": GGML_BUILDS,
    # the smallest vector that build's compiler used for ggml's small plain loops (SSM_CONV's
    # taps, ggml_vec_dot_f32's leftovers): a property of its tuning, not of the ISA class
    "ggml_loop_vectors": LOOP_VECTORS,
}
# Selector keys read from the manifest (weight_type comes from the op's weight tensor).
MANIFEST_SELECTORS = ("kv_cache_dtype", "reference_arithmetic", "weight_layout", "ggml_build",
                      "ggml_loop_vectors")

# Value names that exist before the first op of a section runs.
PREDEFINED: Mapping[str, tuple[str, ...]] = {
    "prologue": ("tokens", "hidden"),  # whichever the circuit's input is
    "block": ("hidden",),
    "epilogue": ("hidden",),
}
POSITIONS = "positions"  # the position stream every rope op reads
DEFAULT_PREFIX = ("blk.{layer}.", "")  # GGUF tensor names: per layer, then global

# Contract families a circuit op kind accepts (logits may be a quantized linear).
TARGET_OPS: Mapping[str, tuple[str, ...]] = {"logits": ("logits", "linear")}

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


# ---- data model ------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One alternative requirement: a contract (and execution) active when `when` matches."""

    contract: str
    when: tuple[tuple[str, str], ...] = ()
    execution: tuple[str, str] | None = None  # (runtime, partition)
    path: str = ""
    layout: str | None = None  # a prepared weight layout the op reads (vocab.PREPARED_LAYOUTS)

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(facts.get(key) == value for key, value in self.when)

    def describe(self) -> str:
        cond = " and ".join(f"{k} == {v}" for k, v in self.when)
        return f"{self.contract} (when {cond})" if cond else self.contract


@dataclass(frozen=True)
class OpTemplate:
    kind: str
    inputs: tuple[str, ...]
    output: str
    path: str  # JSON path of the entry, e.g. $.block[3]
    line: int
    column: int
    status: str
    node: str = ""
    only: tuple[str, ...] = ()
    contracts: Mapping[str, tuple[Choice, ...]] = field(
        default_factory=dict[str, tuple[Choice, ...]]
    )
    weight: str | None = None
    bias: str | None = None
    tied_to: str | None = None
    # manifest fields and constant factors whose product is the width; a nested
    # list is a sum of such products (e.g. the q, k and v channels of a fused projection)
    features: tuple[str | int | tuple[str | int, ...], ...] = ()
    eps: str | None = None
    weight_offset: Mapping[str, float] = field(default_factory=dict[str, float])
    output_scale: tuple[str, str] | None = (
        None  # (kind, manifest field), e.g. ("sqrt", "embedding_length")
    )
    heads: str | None = None
    flatten: bool = False
    freq_base: str | None = None
    dims: str | None = None
    sections: str | None = None
    mask: str | None = None
    scale: tuple[str, str] | None = None
    factor: tuple[str, str] | None = None  # a scale op's (kind, manifest field)
    kv_heads: str | None = None
    window: str | None = None  # manifest field: sliding-window length
    tensors: tuple[str, ...] = ()
    part: int | None = None
    parts: int | None = None

    def in_layer(self, kind: str) -> bool:
        return not self.only or kind in self.only


@dataclass(frozen=True)
class LayerPattern:
    kinds: tuple[str, ...]
    every: str | None = None  # manifest field: the period of the pattern
    at_end_of_period: str | None = None  # the kind of the last layer of each period

    def kind_of(self, layer: int, period: int | None) -> str:
        if self.every is None or period is None:
            return self.kinds[0]
        assert self.at_end_of_period is not None
        if (layer + 1) % period == 0:
            return self.at_end_of_period
        return next(k for k in self.kinds if k != self.at_end_of_period)


@dataclass(frozen=True)
class Circuit:
    family: str
    kind: str
    file: str  # display path, e.g. circuits/<family>.json
    description: str
    status: str
    input: str
    architectures: tuple[str, ...]
    key_prefix: str | None
    config_section: str | None
    match: Mapping[str, str]
    required: tuple[str, ...]
    defaults: Mapping[str, ManifestValue]
    weight_tying: str
    layers: LayerPattern
    prologue: tuple[OpTemplate, ...]
    block: tuple[OpTemplate, ...]
    epilogue: tuple[OpTemplate, ...]
    result: str
    block_prefix: str = DEFAULT_PREFIX[0]  # tensor and node names of layer i start with this
    global_prefix: str = DEFAULT_PREFIX[1]

    def prefix(self, layer: int | None) -> str:
        return self.global_prefix if layer is None else self.block_prefix.format(layer=layer)

    @property
    def phases(self) -> tuple[str, ...]:
        return vocab.PHASES if self.kind == "decoder" else ("prefill",)

    def all_ops(self) -> Iterator[OpTemplate]:
        yield from self.prologue
        yield from self.block
        yield from self.epilogue


class CircuitGaps(DataError):
    """A structurally valid circuit that needs contracts or IR ops that do not exist yet."""

    def __init__(self, file: str, gaps: Sequence[tuple[str, str]]) -> None:
        self.gaps = tuple(gaps)
        lines = [f"{file}: {path}: {message}" for path, message in gaps]
        first_path, _ = gaps[0]
        summary = (
            f"{len(gaps)} requirement(s) cannot be met yet; add the missing contracts "
            "(see circuits/README.md)"
        )
        super().__init__(file, first_path, summary + "\n" + "\n".join(lines))


# ---- source positions ---------------------------------------------------------------


def json_positions(text: str) -> dict[str, tuple[int, int]]:
    """1-based (line, column) of every JSON value, keyed by the JSON path jsondata uses."""
    scanner = _PositionScanner(text)
    scanner.value(0, "$")
    return scanner.positions


class _PositionScanner:
    """Walks JSON text (already known to parse) recording where each value starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.positions: dict[str, tuple[int, int]] = {}
        self.line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.decoder = json.JSONDecoder()

    def where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return line + 1, offset - self.line_starts[line] + 1

    def skip(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in " \t\r\n":
            i += 1
        return i

    def value(self, i: int, path: str) -> int:
        i = self.skip(i)
        self.positions[path] = self.where(i)
        if self.text[i] == "{":
            return self.members(i, path)
        if self.text[i] == "[":
            return self.elements(i, path)
        return self.decoder.raw_decode(self.text, i)[1]

    def members(self, i: int, path: str) -> int:
        i = self.skip(i + 1)
        while self.text[i] != "}":
            # raw_decode at the opening quote reads the key as scanstring would (typeshed
            # does not declare scanstring).
            key, i = self.decoder.raw_decode(self.text, i)
            i = self.skip(self.skip(i) + 1)  # past ':'
            i = self.after_item(self.value(i, f"{path}.{key}"))
        return i + 1

    def elements(self, i: int, path: str) -> int:
        i, index = self.skip(i + 1), 0
        while self.text[i] != "]":
            i = self.after_item(self.value(i, f"{path}[{index}]"))
            index += 1
        return i + 1

    def after_item(self, i: int) -> int:
        i = self.skip(i)
        return self.skip(i + 1) if self.text[i] == "," else i


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
        return Choice(_contract_id(node), path=node.path)
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
    return Choice(_contract_id(node.child("contract")), when, execution, node.path, layout)


def _contract_id(node: Node) -> str:
    contract_id = node.string()
    problem = vocab.loose_id_problem(contract_id)
    if problem:
        raise node.error(problem)
    return contract_id


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
    doc.object(TOP_REQUIRED, ["notes", "requirements", "tensor_prefix"])
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
        block_prefix=prefix[0],
        global_prefix=prefix[1],
    )


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


# ---- whole-circuit rules -------------------------------------------------------------


def check_dataflow(circuit: Circuit, doc: Node) -> None:
    """Every input is defined before use, per layer kind; the block leaves 'hidden' behind."""
    start = "tokens" if circuit.input == "tokens" else "hidden"
    defined = _flow(circuit.prologue, {start}, None, doc)
    if "hidden" not in defined:
        raise doc.child("prologue").error("the prologue must produce the value 'hidden'")
    for layer_kind in circuit.layers.kinds:
        _flow(circuit.block, {"hidden"}, layer_kind, doc)
        if not any(op.output == "hidden" for op in circuit.block if op.in_layer(layer_kind)):
            raise doc.child("block").error(
                f"layer kind '{layer_kind}' never writes 'hidden': a block must pass its result on"
            )
    final = _flow(circuit.epilogue, {"hidden"}, None, doc)
    if circuit.result not in final:
        raise doc.child("result").error(f"the epilogue never produces '{circuit.result}'")


def _flow(
    ops: Sequence[OpTemplate], defined: set[str], layer_kind: str | None, doc: Node
) -> set[str]:
    known = set(defined)
    nodes: dict[str, str] = {}
    for op in ops:
        if layer_kind is not None and not op.in_layer(layer_kind):
            continue
        for name in op.inputs:
            if name not in known:
                where = f" in layer kind '{layer_kind}'" if layer_kind else ""
                raise (
                    _at(doc, op.path)
                    .child("inputs")
                    .error(f"value '{name}' is used before any op defines it{where}")
                )
        if op.node:
            if op.node in nodes:
                raise (
                    _at(doc, op.path)
                    .child("node")
                    .error(f"node '{op.node}' is already used by {nodes[op.node]}")
                )
            nodes[op.node] = op.path
        known.add(op.output)
    return known


def _at(doc: Node, path: str) -> Node:
    """The Node at a JSON path below doc (paths come from this document's own parse)."""
    node = doc
    for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", path.removeprefix("$")):
        key, index = part
        node = node.child(int(index)) if index else node.child(key)
    return node


def check_attention(circuit: Circuit, doc: Node) -> None:
    """A decoder ends with exactly one active decode attention requirement per attention layer."""
    attention_ops = [op for op in circuit.block if op.kind == "attention"]
    if circuit.kind == "decoder" and not attention_ops:
        raise doc.child("block").error("a decoder block needs an attention op")
    for layer_kind in circuit.layers.kinds:
        here = [op for op in attention_ops if op.in_layer(layer_kind)]
        if len(here) > 1:
            raise _at(doc, here[1].path).error(
                f"layer kind '{layer_kind}' has {len(here)} attention ops; "
                "exactly one may be active"
            )
    for op in attention_ops:
        if circuit.kind == "decoder" and op.mask != "causal":
            raise _at(doc, op.path).child("mask").error("a decoder's attention is causal")
        for key, values in SELECTOR_VALUES.items():
            if key != "kv_cache_dtype":
                continue
            for value in values:
                active = [c for c in op.contracts.get("decode", ()) if c.matches({key: value})]
                if len(active) > 1:
                    raise (
                        _at(doc, op.path)
                        .child("contracts")
                        .error(
                            f"{len(active)} decode attention requirements are active when "
                            f"{key} == {value}; exactly one may be"
                        )
                    )


def find_gaps(circuit: Circuit, registry: ContractRegistry) -> list[tuple[str, str]]:
    """Requirements the registry or the IR cannot meet yet, as (JSON path, message)."""
    gaps: list[tuple[str, str]] = []
    missing: dict[tuple[str, str], list[str]] = {}  # (path, contract) -> nodes requiring it
    for op in circuit.all_ops():
        if op.kind in PLANNED_OPS or op.kind in NO_GRAPH_OP:
            gaps.append((op.path, f"op kind '{op.kind}' ('{op.node}') has no GraphIR op yet"))
        for choices in op.contracts.values():
            for choice in choices:
                if _known_contract(circuit.file, op, choice, registry):
                    continue
                nodes = missing.setdefault((choice.path, choice.contract), [])
                if op.node not in nodes:
                    nodes.append(op.node)
    for (path, contract), nodes in missing.items():
        gaps.append(
            (
                path,
                f"contract '{contract}' (required by {', '.join(nodes)}) is not in the "
                "contract registry",
            )
        )
    return gaps


def _known_contract(file: str, op: OpTemplate, choice: Choice, registry: ContractRegistry) -> bool:
    contract = registry.get(choice.contract)
    if contract is None:
        return False
    accepted = TARGET_OPS.get(op.kind, (op.kind,))
    if contract.target_op not in accepted:
        raise DataError(
            file,
            choice.path,
            f"contract '{choice.contract}' is for op '{contract.target_op}', not '{op.kind}'",
        )
    return True


# ---- loading ----------------------------------------------------------------------------


def circuit_file(name_or_path: str) -> tuple[Path, str]:
    """The file for a family name (packaged circuits) or a path, and the name errors show."""
    as_path = Path(name_or_path)
    if as_path.suffix == ".json" or as_path.is_file():
        return as_path, str(as_path)
    packaged = circuits_dir() / f"{name_or_path}.json"
    return packaged, f"circuits/{name_or_path}.json"


def load_circuit(name_or_path: str, registry: ContractRegistry) -> Circuit:
    """Parse and validate one circuit; raise DataError (CircuitGaps for unmet requirements)."""
    file, shown = circuit_file(name_or_path)
    try:
        data = file.read_bytes()
    except OSError as e:
        known = ", ".join(available_circuits())
        raise DataError(
            shown, "$", f"cannot read circuit: {e.strerror or e} (packaged circuits: {known})"
        ) from None
    if (problem := utf8_problem(data)) is not None:
        raise DataError(shown, "$", problem)
    text = data.decode("utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(
            shown, "$", f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    doc = Node(Path(shown), "$", value)
    circuit = parse_circuit(doc, json_positions(text))
    check_dataflow(circuit, doc)
    check_attention(circuit, doc)
    gaps = find_gaps(circuit, registry)
    if gaps:
        raise CircuitGaps(shown, gaps)
    return circuit


def available_circuits() -> list[str]:
    return sorted(p.stem for p in circuits_dir().glob("*.json"))
