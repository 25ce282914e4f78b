"""v8-build: hydrate a circuit with a model manifest into GraphIR.

    v8-build model.gguf --circuit <family> [--prefill-tokens N] [--kv-capacity C] -o out.mlir
    v8-build config.json --circuit <family> --set kv_cache_dtype=f32 -o out.mlir

The circuit supplies the graph and every requirement; the manifest supplies
the numbers (layers, heads, dims, RoPE base, epsilon) and the tensor types
that selectors choose contracts by.  The result is a module with ``@prefill``
and ``@decode`` (an encoder: ``@prefill`` only) whose arguments are the
tokens, positions, KV caches and weights, and whose ops carry the contract
built from the registry, the circuit requirement and a ``loc`` pointing at
the op's entry in the circuit file.

Nothing here knows a model family: a conflict between manifest and circuit
(a missing tensor, a shape the circuit does not predict, a head count that
does not divide, an architecture the circuit does not build) is a located
error and exit code 1.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import IO

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    DictionaryAttr,
    FileLineColLoc,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from v8dialect.data.circuits import (
    MANIFEST_SELECTORS,
    SELECTOR_VALUES,
    Choice,
    Circuit,
    OpTemplate,
    load_circuit,
)
from v8dialect.data.contracts import ContractRegistry, load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.manifest import (
    FIELDS,
    Manifest,
    ManifestError,
    ManifestValue,
    TensorInfo,
    complete,
    parse_override,
    read_manifest,
)
from v8dialect.driver.cli_args import ArgumentParser
from v8dialect.ir.attributes import (
    ExecutionRequirementAttr,
    Mask,
    MaskAttr,
    Phase,
    PhaseAttr,
    Q4KType,
    Q5KType,
    Q6KType,
    Q40Type,
    Q41Type,
    Q50Type,
    Q51Type,
    Q80Type,
    RequirementAttr,
)
from v8dialect.ir.contract_ir import to_attr
from v8dialect.ir.narrowing import tensor_type
from v8dialect.ir.ops import (
    AttentionOp,
    EmbeddingOp,
    GeGLUOp,
    GeluOp,
    HeadSplitOp,
    KVStoreOp,
    LayerNormOp,
    LinearOp,
    LogitsOp,
    PatchMergeOp,
    QKNormOp,
    RecurrentOp,
    ReshapeOp,
    ResidualAddOp,
    RMSNormOp,
    RopeOp,
    ScaleOp,
    SigmoidGateOp,
    SwiGLUOp,
    dtype_name,
)
from v8dialect.ir.ops import element as element_dtype
from v8dialect.ir.ops import shape as tensor_shape
from v8dialect.ir.token_count import MAX_TOKENS_ATTR, TOKEN_AXIS_ATTR
from v8dialect.runtime.host import NATIVE, HostError, native_ggml_build, native_loop_vectors

DEFAULT_PREFILL_TOKENS = 16
MAX_LAYERS = 512  # the most layers llama.cpp loads: no model file it runs has more
MAX_POSITIONS = 2**31 - 1
DEFAULT_KV_CAPACITY = 4096
DECODE_TOKENS = 1
CONFIG_WEIGHT_TYPE = "f32"  # a config JSON has no tensors: weights are taken as fp32

# Metadata that changes the arithmetic in ways no circuit op expresses yet; a
# model stating it must not build silently without it.
UNEXPRESSED_METADATA = ("rope.scaling.type", "attn_logit_softcapping", "final_logit_softcapping")

TensorType_ = TensorType[Attribute]


class BuildError(Exception):
    """A located build failure: `where` is file:line:col (circuit) or a file name (model)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: error: {message}")


@dataclass(frozen=True)
class BuildOptions:
    prefill_tokens: int = DEFAULT_PREFILL_TOKENS
    kv_capacity: int | None = None
    overrides: Mapping[str, ManifestValue] = field(default_factory=dict[str, ManifestValue])


# ---- hydration: the manifest the circuit is built with ---------------------------------


def hydrate(circuit: Circuit, manifest: Manifest) -> Manifest:
    """The manifest completed with the circuit's defaults and checked against the circuit."""
    if manifest.architecture not in circuit.architectures:
        raise BuildError(
            manifest.file,
            f"architecture '{manifest.architecture}' is not one that "
            f"{circuit.file} builds ({', '.join(circuit.architectures)})",
        )
    for key, wanted in circuit.match.items():
        found = manifest.raw.get(key)
        if manifest.source == "gguf" and found != wanted:
            raise BuildError(
                manifest.file,
                f"metadata '{key}' is {found!r}; {circuit.file} builds "
                f"only models where it is '{wanted}'",
            )
    _refuse_unexpressed(circuit, manifest)
    try:
        done = complete(manifest, circuit.defaults, circuit.required)
    except ManifestError as e:
        raise BuildError(manifest.file, str(e).removeprefix(f"{manifest.file}: ")) from None
    _check_heads(manifest.file, done)
    done = _native_build_resolved(done)
    _check_selector_values(done)
    return done


def _check_selector_values(manifest: Manifest) -> None:
    """A selector value no requirement can compare against is a typo, not a default."""
    for key in MANIFEST_SELECTORS:
        value = manifest.get(key)
        if value is not None and value not in SELECTOR_VALUES[key]:
            raise BuildError(manifest.file, f"{key} = {value!r} is not one of "
                                            f"{', '.join(SELECTOR_VALUES[key])}")


# Manifest values whose `native` this machine decides (v8dialect/runtime/host.py).
NATIVE_RESOLVERS: Mapping[str, Callable[[], str]] = {
    "ggml_build": native_ggml_build,
    "ggml_loop_vectors": native_loop_vectors,
}


def _native_build_resolved(manifest: Manifest) -> Manifest:
    """`ggml_build = native` becomes the build class of this machine and `ggml_loop_vectors
    = native` what its compiler makes of ggml's small loops (v8dialect/runtime/host.py): the IR names
    the arithmetic it was built for, never "whatever the host is"."""
    values = dict(manifest.values)
    for key, resolve in NATIVE_RESOLVERS.items():
        if values.get(key) != NATIVE:
            continue
        try:
            values[key] = resolve()
        except HostError as e:
            raise BuildError(manifest.file, str(e)) from None
    if values == manifest.values:
        return manifest
    return Manifest(manifest.source, manifest.file, manifest.architecture, values,
                    manifest.tensors, manifest.raw)


def _refuse_unexpressed(circuit: Circuit, manifest: Manifest) -> None:
    prefix = circuit.key_prefix or manifest.architecture
    for suffix in UNEXPRESSED_METADATA:
        value = manifest.raw.get(f"{prefix}.{suffix}")
        if value is not None and value not in ("none", 0, 0.0):
            raise BuildError(
                manifest.file,
                f"metadata '{prefix}.{suffix}' = {value!r} changes the "
                f"arithmetic, and {circuit.file} declares no op for it",
            )


def _check_heads(file: str, manifest: Manifest) -> None:
    heads, kv_heads = manifest.get("head_count"), manifest.get("head_count_kv")
    if not (isinstance(heads, int) and isinstance(kv_heads, int)):
        return  # absent values are reported by the op that needs them
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise BuildError(
            file,
            f"head_count {heads} is not a multiple of head_count_kv "
            f"{kv_heads} (grouped-query attention needs H % Hkv == 0)",
        )


def default_kv_capacity(manifest: Manifest) -> int:
    """Context length capped at 4096 (sliding windows mask inside a full-size cache)."""
    capacity = DEFAULT_KV_CAPACITY
    context = manifest.get("context_length")
    if isinstance(context, int) and context > 0:
        capacity = min(capacity, context)
    return capacity


# ---- types ---------------------------------------------------------------------------


def element_type(dtype: str) -> Attribute | None:
    return {
        "f32": Float32Type(),
        "f16": Float16Type(),
        "bf16": BFloat16Type(),
        "q4_k": Q4KType(),
        "q5_k": Q5KType(),
        "q6_k": Q6KType(),
        "q8_0": Q80Type(),
        "q5_0": Q50Type(),
        "q4_0": Q40Type(),
        "q4_1": Q41Type(),
        "q5_1": Q51Type(),
        "i32": i32,
    }.get(dtype)


def tensor_of(dims: Sequence[int], element: Attribute) -> TensorType_:
    return TensorType(element, list(dims))


def dims_of(value: SSAValue) -> tuple[int, ...]:
    return tensor_shape(value.type)


# ---- function arguments ------------------------------------------------------------


@dataclass
class Arguments:
    """The entry block's arguments, added on first use; one per (tensor, load transform)."""

    block: Block
    attrs: list[DictionaryAttr] = field(default_factory=list[DictionaryAttr])
    by_key: dict[tuple[str, tuple[tuple[str, float], ...]], SSAValue] = field(
        default_factory=dict[tuple[str, tuple[tuple[str, float], ...]], SSAValue]
    )

    def get(
        self,
        name: str,
        value_type: Attribute,
        location: FileLineColLoc,
        tensor: str | None = None,
        transforms: Mapping[str, float] | None = None,
        token_axis: int | None = None,
    ) -> SSAValue:
        steps = tuple(sorted((transforms or {}).items()))
        key = (tensor or name, steps)
        if key in self.by_key:
            return self.by_key[key]
        arg = self.block.insert_arg(value_type, len(self.block.args))
        arg.name_hint = name
        arg.location = location  # the circuit entry of the op that first reads it
        attrs: dict[str, Attribute] = {}
        if tensor is not None:
            attrs["v8.tensor"] = StringAttr(tensor)
        for step, amount in steps:
            attrs[f"v8.{step}"] = FloatAttr(amount, Float32Type())
        if token_axis is not None:  # this axis has one entry per token of the call
            attrs[TOKEN_AXIS_ATTR] = IntegerAttr(token_axis, i64)
        self.attrs.append(DictionaryAttr(attrs))
        self.by_key[key] = arg
        return arg


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

    def __post_init__(self) -> None:
        self.args = Arguments(self.block)

    def arg(
        self,
        name: str,
        value_type: Attribute,
        tensor: str | None = None,
        transforms: Mapping[str, float] | None = None,
        token_axis: int | None = None,
    ) -> SSAValue:
        assert self.current is not None
        return self.args.get(name, value_type, self.location(self.current), tensor, transforms,
                             token_axis)

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
    ) -> SSAValue:
        """The argument for tensor `<prefix><stem>.weight`, checked against the predicted shape."""
        name = f"{self.circuit.prefix(layer)}{stem}.weight"
        info, element = self.weight_info(op, name, dims)
        self.used_tensors.add(name)
        return self.arg(name, tensor_of(info.shape, element), name, transforms)

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
            "node": StringAttr(f"{self.circuit.prefix(layer)}{op.node}"),
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
        emitter = EMITTERS.get(op.kind)
        if emitter is None:
            raise BuildError(self.where(op), f"op kind '{op.kind}' has no GraphIR op")
        result = emitter(self, op, inputs, layer)
        if op.kind != "reshape":
            result.location = self.location(op)
        self.block.add_op(result)
        out = result.results[0]
        out.name_hint = op.output
        values[op.output] = out

    def emit_embedding(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        vocab_size = self.integer("vocab_size", op)
        width = self.integer("embedding_length", op)
        name = f"{self.circuit.prefix(layer)}{self.stem(op)}.weight"
        dtype = dtype_name(self.weight_info(op, name, (vocab_size, width))[1])
        contract = self.registry.get(self.choose(op, dtype).contract)
        assert contract is not None  # the circuit loaded, so every contract exists
        scales_rows = dict(contract.fields).get("elementwise") == EmbeddingOp.SCALED_ROWS
        scale = None
        if op.output_scale is not None:
            scale = math.sqrt(self.number(op.output_scale[1], op))
        elif scales_rows:
            raise self.conflict(op, f"contract '{contract.id}' multiplies the gathered rows by a "
                                    "scale, and the op declares no output_scale")
        transforms: dict[str, float] = {}
        if scale is not None and not scales_rows:
            # Scaling the rows in fp32 at load gives the bits of scaling every gathered row
            # in fp32 afterwards, so the row-copy contract stays exact.
            transforms["weight_scale"] = scale
        if dtype != "f32" and (transforms or self.offset(op)):
            raise self.conflict(
                op,
                f"the token embedding table is {dtype}: a load transform "
                f"({'the embedding scale' if transforms else 'the weight offset'}) applies to "
                f"fp32 tables only, and contract '{contract.id}' scales no gathered rows",
            )
        table = self.weight(
            op, self.stem(op), layer, (vocab_size, width), {**transforms, **self.offset(op)}
        )
        out = tensor_of((dims_of(inputs[0])[0], width), Float32Type())
        props = self.properties(op, layer, self.weight_dtype(table))
        if scale is not None and scales_rows:
            # one fp32 value, as llama.cpp's ggml_scale takes sqrtf(n_embd)
            props["scale"] = FloatAttr(scale, Float32Type())
        return EmbeddingOp.build(operands=[inputs[0], table], result_types=[out], properties=props)

    def offset(self, op: OpTemplate) -> dict[str, float]:
        amount = op.weight_offset.get(self.manifest.source, 0.0)
        return {"weight_offset": amount} if amount else {}

    def stem(self, op: OpTemplate) -> str:
        assert op.weight is not None
        return op.weight

    def emit_norm(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        (x,) = inputs
        assert op.eps is not None
        w = self.weight(op, self.stem(op), layer, (dims_of(x)[-1],), self.offset(op))
        cls = RMSNormOp if op.kind == "rmsnorm" else QKNormOp
        props = self.properties(op, layer)
        props["eps"] = FloatAttr(float(self.number(op.eps, op)), Float32Type())
        return cls.build(operands=[x, w], result_types=[x.type], properties=props)

    def emit_projection(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        (x,) = inputs
        tokens, k = dims_of(x)
        n = self.width(op)
        w = self.weight(op, self.projection_stem(op, layer), layer, (n, k))
        bias = [self.bias(op, layer, n)] if op.bias is not None else []
        cls = LinearOp if op.kind == "linear" else LogitsOp
        return cls.build(
            operands=[x, w, bias],
            result_types=[tensor_of((tokens, n), Float32Type())],
            properties=self.properties(op, layer, self.weight_dtype(w)),
        )

    def width(self, op: OpTemplate) -> int:
        """Output features: the product of the scalar factors, times the sum of the
        products of the list-valued terms when there are any."""

        def value(f: str | int) -> int:
            return f if isinstance(f, int) else self.integer(f, op)

        factors = [f for f in op.features if not isinstance(f, tuple)]
        terms = [f for f in op.features if isinstance(f, tuple)]
        total = math.prod(value(f) for f in factors)
        if terms:
            total *= sum(math.prod(value(f) for f in term) for term in terms)
        return total

    def projection_stem(self, op: OpTemplate, layer: int | None) -> str:
        """The weight's stem, or the tied tensor's when the circuit and the model say so."""
        if op.tied_to is None or self.circuit.weight_tying == "never":
            return self.stem(op)
        if self.circuit.weight_tying == "always":
            return op.tied_to
        if self.manifest.tensors is None:
            tied = self.manifest.get("tie_word_embeddings")
            return op.tied_to if tied is True else self.stem(op)
        own = f"{self.circuit.prefix(layer)}{self.stem(op)}.weight"
        return self.stem(op) if self.has_tensor(own) else op.tied_to

    def bias(self, op: OpTemplate, layer: int | None, n: int) -> SSAValue:
        assert op.bias is not None
        name = f"{self.circuit.prefix(layer)}{op.bias}.bias"
        info = self.tensor_info(op, name, (n,))
        if info.dtype != "f32":
            raise self.conflict(op, f"bias '{name}' has type {info.dtype}; biases are fp32")
        self.used_tensors.add(name)
        return self.arg(name, tensor_of((n,), Float32Type()), name)

    def emit_reshape(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        (x,) = inputs
        dims = dims_of(x)
        if op.flatten:
            shape = (dims[0], math.prod(dims[1:]))
        else:
            assert op.heads is not None
            heads = self.integer(op.heads, op)
            if dims[-1] % heads:
                raise self.conflict(
                    op, f"{dims[-1]} features do not split into {heads} heads ('{op.heads}')"
                )
            shape = (dims[0], heads, dims[-1] // heads)
        tensor = tensor_type(x.type)
        assert tensor is not None
        return ReshapeOp.build(
            operands=[x], result_types=[tensor_of(shape, tensor.get_element_type())]
        )

    def emit_rope(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        (x,) = inputs
        assert op.freq_base is not None and op.dims is not None
        rotary = self.integer(op.dims, op)
        sections = self.sections(op)
        streams = (len(sections),) if sections else ()
        positions = self.arg("positions", tensor_of((*streams, self.tokens), i32),
                             token_axis=len(streams))
        props = self.properties(op, layer)
        props["freq_base"] = FloatAttr(float(self.number(op.freq_base, op)), Float32Type())
        props["n_dims"] = IntegerAttr(rotary, 64)
        built = RopeOp.build(operands=[x, positions], result_types=[x.type], properties=props)
        if sections:
            built.properties["sections"] = DenseArrayBase.from_list(i32, list(sections))
        return built

    def sections(self, op: OpTemplate) -> tuple[int, ...]:
        if op.sections is None:
            return ()
        value = self.manifest.get(op.sections)
        if not isinstance(value, tuple) or not value:
            raise self.conflict(
                op, f"needs manifest value '{op.sections}' (a list of section sizes)"
            )
        return value

    def emit_attention(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        q, k, v = inputs
        tokens, _heads, dim = dims_of(q)
        assert op.kv_heads is not None and op.mask is not None
        kv_heads = self.integer(op.kv_heads, op)
        for what, value in (("k", k), ("v", v)):
            if dims_of(value) != (tokens, kv_heads, dim):
                raise self.conflict(
                    op,
                    f"{what} is {'x'.join(map(str, dims_of(value)))}; attention "
                    f"needs {tokens}x{kv_heads}x{dim} (q's head dim, "
                    f"'{op.kv_heads}' heads)",
                )
        window = self.window(op)
        kv_dtype = str(self.manifest.get("kv_cache_dtype"))
        element = element_type(kv_dtype)
        if element is None:
            raise self.conflict(op, f"kv_cache_dtype '{kv_dtype}' is not a storage type")
        capacity = self.kv_capacity if self.circuit.kind == "decoder" else tokens
        cache_type = tensor_of((kv_heads, capacity, dim), element)
        prefix = self.circuit.prefix(layer)
        k_cache = self.arg(f"{prefix}k_cache", cache_type)
        v_cache = self.arg(f"{prefix}v_cache", cache_type)
        props = self.properties(op, layer)  # first: an unmatched requirement is the error
        # The new K/V rows enter the cache at [n_past, n_past + T) before attention reads it
        # (an encoder's cache holds exactly its T rows, so it runs with n_past = 0).
        k_cache = self.store(op, layer, "k", k, k_cache, kv_dtype)
        v_cache = self.store(op, layer, "v", v, v_cache, kv_dtype)
        props["mask"] = MaskAttr(Mask(op.mask))
        if window is not None:
            props["window"] = IntegerAttr(window, i64)
        # no scale: the circuit scaled Q before attention (a v8.scale), scores are not scaled
        scale = 1.0 if op.scale is None else 1.0 / math.sqrt(self.number(op.scale[1], op))
        props["scale"] = FloatAttr(scale, Float32Type())
        return AttentionOp.build(
            operands=[q, k_cache, v_cache], result_types=[q.type], properties=props
        )

    def store(
        self,
        op: OpTemplate,
        layer: int | None,
        which: str,
        rows: SSAValue,
        cache: SSAValue,
        kv_dtype: str,
    ) -> SSAValue:
        """A v8.kv_store of `rows` into `cache`, under the registry's one store contract for
        the cache's storage type (the circuit chooses the storage through kv_cache_dtype)."""
        storage = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}.get(kv_dtype)
        found = [
            c
            for c in self.registry.contracts.values()
            if c.op == "kv_store" and dict(c.fields).get("storage") == storage
        ]
        if len(found) != 1:
            shown = ", ".join(c.id for c in found) or "none"
            raise self.conflict(
                op,
                f"a {kv_dtype} KV cache needs exactly one kv_store contract with storage "
                f"{storage} in the registry (found: {shown})",
            )
        props: dict[str, Attribute] = {
            "node": StringAttr(f"{self.circuit.prefix(layer)}{op.node}_{which}_store"),
            "phase": PhaseAttr(Phase(self.phase)),
            "contract": to_attr(found[0], self.registry),
            "requirement": RequirementAttr(StringAttr(self.circuit.file), StringAttr(op.status)),
        }
        stored = KVStoreOp.build(operands=[rows, cache], result_types=[cache.type], properties=props)
        stored.location = self.location(op)
        self.block.add_op(stored)
        stored.results[0].name_hint = f"{which}_cache"
        return stored.results[0]

    def window(self, op: OpTemplate) -> int | None:
        """The op's sliding window in positions (llama.cpp's n_swa), if it has one.

        The KV cache stays full-size: the window masks keys inside it, as llama.cpp's
        full-size SWA cache (its context default) does, so decode's split-KV extent is the
        same on every layer."""
        if op.window is None:
            return None
        window = self.integer(op.window, op)
        if not 1 <= window <= MAX_POSITIONS:
            raise self.conflict(
                op, f"sliding window '{op.window}' = {window} is outside 1..{MAX_POSITIONS}"
            )
        return window

    def emit_binary(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        a, b = inputs
        if a.type != b.type:
            raise BuildError(self.where(op), f"'{op.node}' combines {a.type} and {b.type}")
        cls = {
            "residual_add": ResidualAddOp,
            "swiglu": SwiGLUOp,
            "geglu": GeGLUOp,
            "sigmoid_gate": SigmoidGateOp,
        }[op.kind]
        return cls.build(
            operands=[a, b], result_types=[a.type], properties=self.properties(op, layer)
        )

    def emit_head_split(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        (x,) = inputs
        assert op.part is not None and op.parts is not None
        tokens, heads, width = dims_of(x)
        if width % op.parts:
            raise self.conflict(op, f"a head of {width} does not split into {op.parts} parts")
        props = self.properties(op, layer)
        props["part"] = IntegerAttr(op.part, 64)
        props["parts"] = IntegerAttr(op.parts, 64)
        out = tensor_of((tokens, heads, width // op.parts), Float32Type())
        return HeadSplitOp.build(operands=[x], result_types=[out], properties=props)

    def emit_recurrent(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        """A gated DeltaNet mixer.  `tensors` names, after the layer prefix, the convolution
        kernel, A, the time-step bias and the gated norm's weight, in this order."""
        qkv, z, alpha, beta = inputs
        assert op.eps is not None
        if len(op.tensors) != 4:
            raise BuildError(
                self.where(op),
                f"'{op.node}' names {len(op.tensors)} tensors; a gated DeltaNet reads 4 "
                "(convolution kernel, A, time-step bias, norm weight)",
            )
        hk = self.integer("ssm_group_count", op)
        dk = self.integer("ssm_state_size", op)
        hv = self.integer("ssm_time_step_rank", op)
        inner = self.integer("ssm_inner_size", op)
        kernel = self.integer("ssm_conv_kernel", op)
        if inner % hv or hv % hk:
            raise self.conflict(
                op,
                f"ssm_inner_size {inner} does not split into {hv} value heads, or {hv} value "
                f"heads do not share {hk} key heads",
            )
        dv = inner // hv
        channels = 2 * hk * dk + inner
        tokens = dims_of(qkv)[0]
        for what, value, dims in (
            ("qkv", qkv, (tokens, channels)),
            ("z", z, (tokens, inner)),
            ("alpha", alpha, (tokens, hv)),
            ("beta", beta, (tokens, hv)),
        ):
            if dims_of(value) != dims:
                raise self.conflict(
                    op,
                    f"{what} is {'x'.join(map(str, dims_of(value)))}; the mixer needs "
                    f"{'x'.join(map(str, dims))}",
                )
        shapes = ((channels, kernel), (hv,), (hv,), (dv,))
        weights = [
            self.named_tensor(op, stem, layer, dims)
            for stem, dims in zip(op.tensors, shapes, strict=True)
        ]
        prefix = self.circuit.prefix(layer)
        conv_state = self.arg(f"{prefix}conv_state", tensor_of((channels, kernel - 1), Float32Type()))
        ssm_state = self.arg(f"{prefix}ssm_state", tensor_of((hv, dv, dk), Float32Type()))
        props = self.properties(op, layer)
        props["n_k_heads"] = IntegerAttr(hk, 64)
        props["eps"] = FloatAttr(float(self.number(op.eps, op)), Float32Type())
        return RecurrentOp.build(
            operands=[qkv, z, alpha, beta, *weights, conv_state, ssm_state],
            result_types=[tensor_of((tokens, inner), Float32Type())],
            properties=props,
        )

    def named_tensor(
        self, op: OpTemplate, stem: str, layer: int | None, dims: Sequence[int]
    ) -> SSAValue:
        """The fp32 argument for tensor `<prefix><stem>` (the stem names any suffix)."""
        name = f"{self.circuit.prefix(layer)}{stem}"
        info = self.tensor_info(op, name, dims)
        if info.dtype != "f32":
            raise self.conflict(op, f"tensor '{name}' has type {info.dtype}; it must be f32")
        self.used_tensors.add(name)
        return self.arg(name, tensor_of(info.shape, Float32Type()), name)

    def emit_layer_norm(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        (x,) = inputs
        assert op.eps is not None
        width = dims_of(x)[-1]
        w = self.weight(op, self.stem(op), layer, (width,))
        if self.weight_dtype(w) != "f32":
            raise self.conflict(op, f"'{op.node}' needs an f32 weight, got {self.weight_dtype(w)}")
        bias = self.bias(op, layer, width)
        props = self.properties(op, layer)
        props["eps"] = FloatAttr(float(self.number(op.eps, op)), Float32Type())
        return LayerNormOp.build(operands=[x, w, bias], result_types=[x.type], properties=props)

    def emit_gelu(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        (x,) = inputs
        return GeluOp.build(operands=[x], result_types=[x.type], properties=self.properties(op, layer))

    def emit_scale(self, op: OpTemplate, inputs: list[SSAValue], layer: int | None) -> Operation:
        (x,) = inputs
        assert op.factor is not None
        # 1.0f / sqrtf(n) in fp32, as llama.cpp computes such factors (f_attention_scale)
        root = np.sqrt(np.float32(self.number(op.factor[1], op)))
        props = self.properties(op, layer)
        props["factor"] = FloatAttr(float(np.float32(1.0) / root), Float32Type())
        return ScaleOp.build(operands=[x], result_types=[x.type], properties=props)

    def emit_patch_merge(
        self, op: OpTemplate, inputs: list[SSAValue], layer: int | None
    ) -> Operation:
        (x,) = inputs
        tokens, width = dims_of(x)
        window = PatchMergeOp.WINDOW
        if tokens % window:
            raise self.conflict(
                op, f"{tokens} patches do not form 2x2 merge windows (a multiple of {window})"
            )
        out = tensor_of((tokens // window, width * window), Float32Type())
        return PatchMergeOp.build(operands=[x], result_types=[out], properties=self.properties(op, layer))

    # -- the function --------------------------------------------------------------------

    def build(self, name: str) -> FuncOp:
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
        period = self.period()
        for layer in range(self.block_count()):
            kind = self.circuit.layers.kind_of(layer, period)
            for op in self.circuit.block:
                if op.in_layer(kind):
                    self.emit(op, values, layer)
        for op in self.circuit.epilogue:
            self.emit(op, values, None)
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
        return fn

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


EMITTERS = {
    "embedding": FunctionBuilder.emit_embedding,
    "rmsnorm": FunctionBuilder.emit_norm,
    "qk_norm": FunctionBuilder.emit_norm,
    "linear": FunctionBuilder.emit_projection,
    "logits": FunctionBuilder.emit_projection,
    "reshape": FunctionBuilder.emit_reshape,
    "rope": FunctionBuilder.emit_rope,
    "attention": FunctionBuilder.emit_attention,
    "residual_add": FunctionBuilder.emit_binary,
    "swiglu": FunctionBuilder.emit_binary,
    "geglu": FunctionBuilder.emit_binary,
    "sigmoid_gate": FunctionBuilder.emit_binary,
    "head_split": FunctionBuilder.emit_head_split,
    "recurrent": FunctionBuilder.emit_recurrent,
    "layer_norm": FunctionBuilder.emit_layer_norm,
    "gelu": FunctionBuilder.emit_gelu,
    "scale": FunctionBuilder.emit_scale,
    "patch_merge": FunctionBuilder.emit_patch_merge,
}


# ---- the module ------------------------------------------------------------------------


def build_module(
    circuit: Circuit, manifest: Manifest, registry: ContractRegistry, options: BuildOptions
) -> ModuleOp:
    manifest = hydrate(circuit, manifest.with_values(options.overrides))
    capacity = options.kv_capacity or default_kv_capacity(manifest)
    if options.prefill_tokens < 1 or capacity < 1:
        raise BuildError("<command line>", "--prefill-tokens and --kv-capacity must be positive")
    if max(options.prefill_tokens, capacity) > MAX_POSITIONS:
        # positions are int32 in the IR and in the C ABI (and in llama.cpp)
        raise BuildError("<command line>", f"--prefill-tokens and --kv-capacity must be at most "
                         f"{MAX_POSITIONS}")
    if circuit.kind == "decoder" and options.prefill_tokens > capacity:
        raise BuildError(
            "<command line>",
            f"{options.prefill_tokens} prefill tokens do not fit a KV "
            f"cache of {capacity} positions",
        )
    functions: list[Operation] = []
    used: set[str] = set()
    for phase in circuit.phases:
        tokens = options.prefill_tokens if phase == "prefill" else DECODE_TOKENS
        builder = FunctionBuilder(circuit, manifest, registry, phase, tokens, capacity)
        functions.append(builder.build(phase))
        used |= builder.used_tensors
        if phase == "decode" and len(builder.attention_contracts) != 1:
            found = ", ".join(sorted(builder.attention_contracts)) or "none"
            raise BuildError(
                circuit.file,
                "a decoder must end with exactly one active decode "
                f"attention contract; this model activates: {found}",
            )
    _refuse_unused_tensors(manifest, used, circuit)
    module = ModuleOp(functions)
    module.attributes["v8.circuit"] = StringAttr(circuit.file)
    module.attributes["v8.manifest"] = manifest_attr(manifest, capacity)
    return module


def _refuse_unused_tensors(manifest: Manifest, used: set[str], circuit: Circuit) -> None:
    """A tensor the circuit never reads is arithmetic the build would silently drop."""
    if manifest.tensors is None:
        return
    unused = sorted(set(manifest.tensors) - used)
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        raise BuildError(
            manifest.file, f"{len(unused)} tensor(s) that {circuit.file} never reads: {shown}"
        )


def manifest_attr(manifest: Manifest, kv_capacity: int) -> DictionaryAttr:
    """The hydrated values, so a reader of the IR sees what the circuit was built with."""
    entries: dict[str, Attribute] = {
        "source": StringAttr(manifest.file),
        "architecture": StringAttr(manifest.architecture),
        "kv_capacity": IntegerAttr(kv_capacity, 64),
    }
    for name in FIELDS:
        value = manifest.get(name)
        if value is None:
            continue
        entries[name] = _value_attr(value)
    return DictionaryAttr(entries)


def _value_attr(value: ManifestValue) -> Attribute:
    match value:
        case bool():
            return IntegerAttr(int(value), IntegerType(1))
        case int():
            return IntegerAttr(value, 64)
        case float():
            return FloatAttr(value, Float32Type())
        case str():
            return StringAttr(value)
        case _:
            return ArrayAttr([IntegerAttr(v, 64) for v in value])


class ReusingPrinter(Printer):
    """xDSL's printer, printing each distinct attribute once: a model repeats the same
    contracts, types and locations on every layer, and the printer writes them a character
    at a time.  The text is the printer's own, so the output is byte for byte the same:
    equal xDSL attributes print alike (FloatData compares bits, so 0.0 and -0.0 differ)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream=stream, print_debuginfo=True)
        self._texts: dict[Attribute, str] = {}

    def print_attribute(self, attribute: Attribute) -> None:
        text = self._texts.get(attribute)
        if text is None:
            text = self._printed(attribute)
            if text is None:
                return  # printed across lines, straight to the stream
            self._texts[attribute] = text
        self.print_string(text)

    def _printed(self, attribute: Attribute) -> str | None:
        """The attribute's text, when it is one line (indentation then plays no part)."""
        stream, column = self.stream, self._current_column
        self.stream = StringIO()
        try:
            super().print_attribute(attribute)
            text = self.stream.getvalue()
        finally:
            self.stream, self._current_column = stream, column
        if "\n" in text:
            super().print_attribute(attribute)
            return None
        return text


def print_module(module: ModuleOp, stream: IO[str]) -> None:
    ReusingPrinter(stream).print_op(module)
    stream.write("\n")


# ---- command line -------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    assert __doc__ is not None  # the module docstring is the command's help
    parser = ArgumentParser(prog="v8-build", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a GGUF file or a config JSON")
    parser.add_argument(
        "--circuit", required=True, help="a family name (circuits/<name>.json) or a path"
    )
    parser.add_argument("--prefill-tokens", type=int, default=DEFAULT_PREFILL_TOKENS,
                        help="most tokens per prefill call (a decoder's count is a run-time "
                             "argument up to this)")
    parser.add_argument(
        "--kv-capacity",
        type=int,
        default=None,
        help="KV cache positions (default: context length capped at 4096 and at "
        "any sliding window)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a manifest value, e.g. kv_cache_dtype=f32",
    )
    parser.add_argument(
        "--registry",
        type=Path,
        action="append",
        default=None,
        help="contract registry files or folders (default: the packaged contracts/)",
    )
    parser.add_argument("-o", "--output", type=Path, default=None)
    return parser.parse_args(argv)


def build_from_file(model: Path, circuit_name: str, *, prefill_tokens: int = DEFAULT_PREFILL_TOKENS,
                    kv_capacity: int | None = None, overrides: Sequence[str] = (),
                    registry_paths: Sequence[Path] | None = None) -> ModuleOp:
    """The GraphIR module for a model file (GGUF or config JSON) and a circuit; every
    user error is a BuildError naming the file."""
    try:
        registry = load_registry(registry_paths)
    except DataError as e:
        raise BuildError(f"{e.file}:{e.json_path}", f"bad contract registry: {e.message}") from None
    try:
        circuit = load_circuit(circuit_name, registry)
    except DataError as e:
        raise BuildError(f"{e.file}:{e.json_path}", f"bad circuit: {e.message}") from None
    try:
        values = dict(parse_override(text) for text in overrides)
        manifest = read_manifest(model, circuit.key_prefix, circuit.config_section)
    except ManifestError as e:
        raise BuildError(str(model), str(e).removeprefix(f"{model}: ")) from None
    module = build_module(circuit, manifest, registry, BuildOptions(prefill_tokens, kv_capacity, values))
    try:
        module.verify()
    except VerifyException as e:  # a builder bug, not a user error: still no traceback
        raise BuildError(circuit.file, f"the built module does not verify: {e}") from None
    return module


def run(args: argparse.Namespace) -> None:
    module = build_from_file(args.model, args.circuit, prefill_tokens=args.prefill_tokens,
                             kv_capacity=args.kv_capacity, overrides=args.set,
                             registry_paths=args.registry)
    if args.output is None:
        print_module(module, sys.stdout)
        return
    with args.output.open("w", encoding="utf-8") as stream:
        print_module(module, stream)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except BuildError as e:
        print(str(e), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
