"""One phase of a model as a function: the op-independent services every op kind's build hook uses
(arguments, manifest values, weights, requirements) and the walk over the circuit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FileLineColLoc,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    i32,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Region, SSAValue

from v8dialect.builder.layers import LayerOutliner, live_across_layers
from v8dialect.builder.values import (
    CONFIG_WEIGHT_TYPE,
    MAX_LAYERS,
    BuildError,
    dims_of,
    element_type,
    tensor_of,
)
from v8dialect.data import vocab
from v8dialect.data.circuit_model import (
    MANIFEST_SELECTORS,
    Choice,
    Circuit,
    OpTemplate,
)
from v8dialect.data.contracts import ContractRegistry
from v8dialect.data.manifest import (
    Manifest,
    TensorInfo,
)
from v8dialect.ir.contract_ir import to_attr
from v8dialect.ir.graph_op import LAYOUT_ATTR
from v8dialect.ir.graph_op import element as element_dtype
from v8dialect.ir.resolution_attrs import (
    ExecutionRequirementAttr,
    RequirementAttr,
)
from v8dialect.ir.token_count import MAX_TOKENS_ATTR, TOKEN_AXIS_ATTR
from v8dialect.ir.types import (
    Phase,
    PhaseAttr,
)
from v8dialect.ops.last_token import LastTokenOp
from v8dialect.ops.registry import op_kind

# ---- function arguments ------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    """What an entry-block argument stands for: the key it was added under and its attributes."""

    name: str
    value_type: Attribute
    location: FileLineColLoc
    tensor: str | None = None
    transforms: tuple[tuple[str, float], ...] = ()
    token_axis: int | None = None
    layout: str | None = None

    @property
    def key(self) -> tuple[str, tuple[tuple[str, float], ...], str | None]:
        return (self.tensor or self.name, self.transforms, self.layout)

    def renamed(self, old_prefix: str, new_prefix: str) -> ArgSpec:
        """The same argument of another layer: names under `old_prefix` move to `new_prefix`."""
        def move(text: str) -> str:
            return new_prefix + text.removeprefix(old_prefix) if text.startswith(old_prefix) else text
        return ArgSpec(move(self.name), self.value_type, self.location,
                       None if self.tensor is None else move(self.tensor), self.transforms,
                       self.token_axis, self.layout)

    def attributes(self, tensor_name: bool = True) -> DictionaryAttr:
        """The argument's attributes (a layer function's arguments name no file tensor)."""
        attrs: dict[str, Attribute] = {}
        if self.tensor is not None and tensor_name:
            attrs["v8.tensor"] = StringAttr(self.tensor)
        for step, amount in self.transforms:
            attrs[f"v8.{step}"] = FloatAttr(amount, Float32Type())
        if self.token_axis is not None:  # this axis has one entry per token of the call
            attrs[TOKEN_AXIS_ATTR] = IntegerAttr(self.token_axis, i64)
        if self.layout is not None:  # a copy in this layout, made at load time
            attrs[LAYOUT_ATTR] = StringAttr(self.layout)
        return DictionaryAttr(attrs)


@dataclass
class Arguments:
    """The entry block's arguments, added on first use; one per (tensor, load transform,
    prepared layout)."""

    block: Block
    specs: list[ArgSpec] = field(default_factory=list[ArgSpec])
    by_key: dict[tuple[str, tuple[tuple[str, float], ...], str | None], SSAValue] = field(
        default_factory=dict[tuple[str, tuple[tuple[str, float], ...], str | None], SSAValue]
    )

    def get(
        self,
        name: str,
        value_type: Attribute,
        location: FileLineColLoc,
        tensor: str | None = None,
        transforms: Mapping[str, float] | None = None,
        token_axis: int | None = None,
        layout: str | None = None,
    ) -> SSAValue:
        steps = tuple(sorted((transforms or {}).items()))
        return self.of(ArgSpec(name, value_type, location, tensor, steps, token_axis, layout))

    def of(self, spec: ArgSpec) -> SSAValue:
        if spec.key in self.by_key:
            return self.by_key[spec.key]
        arg = self.block.insert_arg(spec.value_type, len(self.block.args))
        arg.name_hint = spec.name
        arg.location = spec.location  # the circuit entry of the op that first reads it
        self.specs.append(spec)
        self.by_key[spec.key] = arg
        return arg

    @property
    def attrs(self) -> list[DictionaryAttr]:
        return [spec.attributes() for spec in self.specs]


# ---- one function ---------------------------------------------------------------------


@dataclass
class FunctionBuilder:
    circuit: Circuit
    manifest: Manifest
    registry: ContractRegistry
    phase: str
    tokens: int
    kv_capacity: int
    block: Block = field(default_factory=Block)
    args: Arguments = field(init=False)
    used_tensors: set[str] = field(default_factory=set[str])
    attention_contracts: set[str] = field(default_factory=set[str])
    current: OpTemplate | None = None  # the op being emitted; its entry locates new arguments
    in_layer_function: bool = False  # building a layer function: node names without the layer prefix
    expand_layers: bool = False  # every layer's ops in the phase, not calls of layer functions
    # a prefill that returns its last token's result only: the last layer keeps that token's
    # rows from the circuit's output_rows node on (a layer function: the layer it builds is that)
    last_token_only: bool = False

    def __post_init__(self) -> None:
        self.args = Arguments(self.block)

    def arg(
        self,
        name: str,
        value_type: Attribute,
        tensor: str | None = None,
        transforms: Mapping[str, float] | None = None,
        token_axis: int | None = None,
        layout: str | None = None,
    ) -> SSAValue:
        assert self.current is not None
        return self.args.get(name, value_type, self.location(self.current), tensor, transforms,
                             token_axis, layout)

    # -- manifest access ---------------------------------------------------------------

    def number(self, name: str, op: OpTemplate) -> int | float:
        value = self.manifest.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.conflict(
                op,
                f"needs manifest value '{name}', which the model does not state "
                "and the circuit gives no default for",
            )
        return value

    def integer(self, name: str, op: OpTemplate) -> int:
        value = self.number(name, op)
        if not isinstance(value, int) or value < 1:
            raise self.conflict(op, f"manifest value '{name}' = {value} must be a positive integer")
        return value

    def conflict(self, op: OpTemplate, message: str) -> BuildError:
        return BuildError(
            self.manifest.file,
            f"{message} (required by '{op.node or op.kind}' at {self.where(op)})",
        )

    def where(self, op: OpTemplate) -> str:
        return f"{self.circuit.file}:{op.line}:{op.column}"

    def location(self, op: OpTemplate) -> FileLineColLoc:
        return FileLineColLoc(StringAttr(self.circuit.file), IntAttr(op.line), IntAttr(op.column))

    # -- tensors -----------------------------------------------------------------------

    def weight(
        self,
        op: OpTemplate,
        stem: str,
        layer: int | None,
        dims: Sequence[int],
        transforms: Mapping[str, float] | None = None,
        layout: str | None = None,
    ) -> SSAValue:
        """The argument for tensor `<prefix><stem>.weight`, checked against the predicted shape
        (a copy in a prepared `layout`, made at load time, is an argument of its own)."""
        name = f"{self.circuit.prefix(layer)}{stem}.weight"
        info, element = self.weight_info(op, name, dims)
        self.used_tensors.add(name)
        return self.arg(name, tensor_of(info.shape, element), name, transforms, layout=layout)

    def weight_layout(self, op: OpTemplate, stem: str, layer: int | None, dims: Sequence[int]) -> str | None:
        """The prepared layout the op's active requirement reads its weight in, if any; checked
        against the tensor's type."""
        name = f"{self.circuit.prefix(layer)}{stem}.weight"
        _, element = self.weight_info(op, name, dims)
        dtype = element_dtype(tensor_of(tuple(dims), element))
        layout = self.choose(op, dtype).layout
        if layout is not None and vocab.PREPARED_LAYOUTS[layout][0] != dtype:
            raise self.conflict(op, f"the requirement reads '{name}' in layout '{layout}', a layout of "
                                    f"{vocab.PREPARED_LAYOUTS[layout][0]} weights, but it is {dtype}")
        return layout

    def weight_info(
        self, op: OpTemplate, name: str, dims: Sequence[int]
    ) -> tuple[TensorInfo, Attribute]:
        """A weight tensor's stored shape and type, checked, and its v8 element type."""
        info = self.tensor_info(op, name, dims)
        element = element_type(info.dtype)
        if element is None or info.dtype == "i32":
            raise self.conflict(
                op, f"tensor '{name}' has type {info.dtype}, which no v8 element type represents"
            )
        return info, element

    def tensor_info(self, op: OpTemplate, name: str, dims: Sequence[int]) -> TensorInfo:
        tensors = self.manifest.tensors
        if tensors is None:
            return TensorInfo(CONFIG_WEIGHT_TYPE, tuple(dims))
        info = tensors.get(name)
        if info is None:
            raise self.conflict(op, f"the model has no tensor '{name}'")
        if info.shape != tuple(dims):
            shown = "x".join(str(d) for d in info.shape)
            wanted = "x".join(str(d) for d in dims)
            raise self.conflict(op, f"tensor '{name}' is {shown}, the circuit predicts {wanted}")
        return info

    def has_tensor(self, name: str) -> bool:
        return self.manifest.tensors is not None and name in self.manifest.tensors

    def weight_dtype(self, value: SSAValue) -> str:
        return element_dtype(value.type)

    def node_name(self, node: str | None, layer: int | None) -> StringAttr:
        """A node's name: layer-prefixed in a phase, the circuit's own in a layer function."""
        prefix = "" if self.in_layer_function else self.circuit.prefix(layer)
        return StringAttr(f"{prefix}{node}")

    # -- requirements -------------------------------------------------------------------

    def choose(self, op: OpTemplate, weight_type: str | None) -> Choice:
        facts = {key: str(self.manifest.get(key)) for key in MANIFEST_SELECTORS
                 if self.manifest.get(key) is not None}
        if weight_type is not None:
            facts["weight_type"] = weight_type
        choices = op.contracts[self.phase]
        active = [c for c in choices if c.matches(facts)]
        if len(active) != 1:
            asked = {key for c in choices for key, _ in c.when}  # what the choices depend on
            shown = ", ".join(f"{k} = {v}" for k, v in sorted(facts.items()) if k in asked)
            offered = "; ".join(c.describe() for c in choices)
            count = "no" if not active else f"{len(active)}"
            raise self.conflict(
                op,
                f"{count} {self.phase} requirement of '{op.node}' is active for "
                f"{shown} (declared: {offered})",
            )
        return active[0]

    def properties(
        self, op: OpTemplate, layer: int | None, weight_type: str | None = None
    ) -> dict[str, Attribute]:
        choice = self.choose(op, weight_type)
        contract = self.registry.get(choice.contract)
        assert contract is not None  # the circuit loaded, so every contract exists
        props: dict[str, Attribute] = {
            "node": self.node_name(op.node, layer),
            "phase": PhaseAttr(Phase(self.phase)),
            "contract": to_attr(contract, self.registry),
            "requirement": RequirementAttr(StringAttr(self.circuit.file), StringAttr(op.status)),
        }
        if choice.execution is not None:
            runtime, partition = choice.execution
            props["execution"] = ExecutionRequirementAttr(
                StringAttr(runtime), StringAttr(partition)
            )
        if op.kind == "attention":
            self.attention_contracts.add(choice.contract)
        return props

    # -- ops ---------------------------------------------------------------------------

    def emit(self, op: OpTemplate, values: dict[str, SSAValue], layer: int | None) -> None:
        inputs = [values[name] for name in op.inputs]
        self.current = op
        kind = op_kind(op.kind)
        if kind is None or kind.build is None:
            raise BuildError(self.where(op), f"op kind '{op.kind}' has no GraphIR op")
        result = kind.build(self, op, inputs, layer)
        if op.kind != "reshape":
            result.location = self.location(op)
        self.block.add_op(result)
        out = result.results[0]
        out.name_hint = op.output
        values[op.output] = out

    def offset(self, op: OpTemplate) -> dict[str, float]:
        amount = op.weight_offset.get(self.manifest.source, 0.0)
        return {"weight_offset": amount} if amount else {}

    def stem(self, op: OpTemplate) -> str:
        assert op.weight is not None
        return op.weight

    def bias(self, op: OpTemplate, layer: int | None, n: int) -> SSAValue:
        assert op.bias is not None
        name = f"{self.circuit.prefix(layer)}{op.bias}.bias"
        info = self.tensor_info(op, name, (n,))
        if info.dtype != "f32":
            raise self.conflict(op, f"bias '{name}' has type {info.dtype}; biases are fp32")
        self.used_tensors.add(name)
        return self.arg(name, tensor_of((n,), Float32Type()), name)

    # -- the function --------------------------------------------------------------------

    def build(self, name: str) -> list[FuncOp]:
        """The phase function, after the layer functions it calls."""
        values: dict[str, SSAValue] = {}
        self.current = next(self.circuit.all_ops())
        if self.circuit.input == "tokens":
            values["tokens"] = self.arg("tokens", tensor_of((self.tokens,), i32), token_axis=0)
        else:
            width = self.integer_field("embedding_length")
            values["hidden"] = self.arg(
                "embeddings", tensor_of((self.tokens, width), Float32Type()), token_axis=0
            )
        for op in self.circuit.prologue:
            self.emit(op, values, None)
        self.check_output_rows()
        layer_functions = self.build_layers(values)
        if self.last_token_only and self.tokens > 1 and not self.epilogue_selects():
            self.check_one_row(values)
        for op in self.circuit.epilogue:
            self.emit(op, values, None)
            if self.last_token_only and self.epilogue_selects():
                self.select_rows(op, values)
        result = values[self.circuit.result]
        self.block.add_op(ReturnOp(result))
        arg_types = [a.type for a in self.block.args]
        fn = FuncOp(
            name,
            (arg_types, [result.type]),
            Region(self.block),
            arg_attrs=ArrayAttr(self.args.attrs),
        )
        if self.circuit.kind == "decoder" and self.phase == "prefill":
            # a decoder's prefill takes any token count up to the built one at run time (the
            # kernels see the count; buffers are sized for the maximum)
            fn.attributes[MAX_TOKENS_ATTR] = IntegerAttr(self.tokens, i64)
        return [*layer_functions, fn]

    def selects_rows(self, layer: int) -> bool:
        """Whether `layer` keeps only the last token's rows from the circuit's output_rows node."""
        return self.last_token_only and not self.epilogue_selects() and layer == self.block_count() - 1

    def epilogue_selects(self) -> bool:
        """Whether the circuit's output_rows node is in the epilogue (the layers keep every row)."""
        rows = self.circuit.output_rows
        return rows is not None and rows.in_epilogue

    def select_rows(self, op: OpTemplate, values: dict[str, SSAValue]) -> None:
        """After the circuit's output_rows node: its selected values become their last token's
        rows (the node itself, like every op before it, ran on every token)."""
        rows = self.circuit.output_rows
        assert rows is not None  # checked before the layers are built
        if op.node != rows.after:
            return
        for name in rows.select:
            selected = LastTokenOp(values[name])
            selected.location = self.location(op)
            self.block.add_op(selected)
            selected.result.name_hint = f"{name}_rows"
            values[name] = selected.result

    def check_output_rows(self) -> None:
        if self.last_token_only and self.circuit.output_rows is None:
            raise BuildError(self.circuit.file, "this circuit declares no 'output_rows' (where "
                             "llama.cpp's graph keeps the rows a call returns), so its prefill "
                             "cannot return the last token's logits only")

    def check_one_row(self, values: dict[str, SSAValue]) -> None:
        """With the last token's rows selected, the epilogue reads one row of each input it
        takes from the layers."""
        assigned: set[str] = set()
        for op in self.circuit.epilogue:
            for name in op.inputs:
                if name not in assigned and dims_of(values[name])[0] != 1:
                    raise BuildError(self.where(op), f"'{name}' still has one row per token "
                                     "after the circuit's output_rows selection")
            assigned.add(op.output)

    def build_layers(self, values: dict[str, SSAValue]) -> list[FuncOp]:
        """The layers, as calls of layer functions (returned) or expanded into the phase."""
        period = self.period()
        kinds = [self.circuit.layers.kind_of(layer, period) for layer in range(self.block_count())]
        if self.expand_layers:
            for layer, kind in enumerate(kinds):
                for op in self.circuit.block:
                    if op.in_layer(kind):
                        self.emit(op, values, layer)
                        if self.selects_rows(layer):
                            self.select_rows(op, values)
            return []
        outliner = LayerOutliner(self, live_across_layers(self.circuit, set(kinds)))
        for layer, kind in enumerate(kinds):
            outliner.call(layer, kind, values)
        return outliner.finished()

    def block_count(self) -> int:
        """The layer count, within llama.cpp's own limit: each layer is emitted as ops, so an
        absurd count would be a build that never ends rather than an error."""
        layers = self.integer_field("block_count")
        if layers > MAX_LAYERS:
            raise BuildError(self.manifest.file, f"manifest value 'block_count' = {layers} "
                             f"exceeds {MAX_LAYERS} layers, the most llama.cpp loads")
        return layers

    def integer_field(self, name: str) -> int:
        value = self.manifest.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BuildError(
                self.manifest.file,
                f"manifest value '{name}' must be a positive integer, got {value!r}",
            )
        return value

    def period(self) -> int | None:
        every = self.circuit.layers.every
        return None if every is None else self.integer_field(every)


