"""A phase's layers as functions: one private function per distinct layer, called per layer.

A 28-layer model repeats the same ~45 ops 28 times; emitted once per layer they make the IR,
every pass over it and the C program 28 times larger than the arithmetic needs.  The builder
therefore builds a layer's ops once as ``func.func private @<phase>_layer<n>`` and calls it from
the phase with that layer's weights and caches (``func.call``); lowering turns the call into a
``v8.invoke`` on buffers and the C printer into a call of a static C function.

Two layers share a function exactly when building them would give the same ops: the same layer
kind and, tensor by tensor under their prefixes (``blk.<i>.``), the same stored types and shapes
(the only facts an op's build reads per layer; requirements choose by weight type).  Inside a
layer function node names drop the layer prefix (``attn_q``); its arguments are the values the
layer reads from before it (the hidden state) and the representative layer's weights and caches,
renamed per call site.  ``--expand-layers`` builds every layer's ops into the phase instead
(the form keep-checkpoints needs, which names every layer's node).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ArrayAttr, FileLineColLoc, IntegerAttr, i64
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import Region, SSAValue

from v8dialect.data.circuit_model import Circuit
from v8dialect.ir.token_count import MAX_TOKENS_ATTR

if TYPE_CHECKING:
    from v8dialect.builder.function import ArgSpec, Arguments, FunctionBuilder

LAYERS_ATTR = "v8.layers"  # on a layer function: the layers that call it


class LayerValues(dict[str, SSAValue]):
    """A layer function's values by circuit name: a name the layer reads before assigning it
    comes from the caller and becomes an argument of the function."""

    def __init__(self, outer: Mapping[str, SSAValue], args: Arguments, location: FileLineColLoc) -> None:
        super().__init__()
        self.outer, self.args, self.location = outer, args, location
        self.carried: dict[int, str] = {}  # argument index -> the caller's value name
        self.assigned: list[str] = []

    def __missing__(self, name: str) -> SSAValue:
        outer = self.outer[name]  # KeyError as before: the circuit reads an undefined name
        value = self.args.get(name, outer.type, self.location)
        self.carried[len(self.args.specs) - 1] = name
        super().__setitem__(name, value)
        return value

    def __setitem__(self, name: str, value: SSAValue) -> None:
        super().__setitem__(name, value)
        if name not in self.assigned:
            self.assigned.append(name)


def live_across_layers(circuit: Circuit, kinds: set[str]) -> set[str]:
    """Names a layer must hand on: those a layer of some kind reads before assigning them
    (the state carried from layer to layer) and those the epilogue reads."""
    live = {circuit.result}
    for op in circuit.epilogue:
        live.update(op.inputs)
    for kind in kinds:
        assigned: set[str] = set()
        for op in circuit.block:
            if op.in_layer(kind):
                live.update(name for name in op.inputs if name not in assigned)
                assigned.add(op.output)
    return live


@dataclass
class LayerFunction:
    fn: FuncOp
    representative: int
    carried: dict[int, str]
    outputs: list[str]
    specs: list[ArgSpec]
    location: FileLineColLoc  # the layer's first op in the circuit: where its calls point
    layers: list[int] = field(default_factory=list[int])


@dataclass
class LayerOutliner:
    """Builds each distinct layer once and calls it from the phase being built."""

    phase: FunctionBuilder
    live: set[str]
    functions: dict[Hashable, LayerFunction] = field(default_factory=dict[Hashable, LayerFunction])

    def key(self, layer: int, kind: str) -> Hashable:
        """Equal for two layers exactly when their ops would be built alike."""
        tensors = self.phase.manifest.tensors
        selects = self.phase.selects_rows(layer)  # the last layer may keep fewer rows
        if tensors is None:
            return (kind, selects)
        prefix = self.phase.circuit.prefix(layer)
        return (kind, selects, tuple(sorted((name.removeprefix(prefix), info.dtype, info.shape)
                                            for name, info in tensors.items() if name.startswith(prefix))))

    def call(self, layer: int, kind: str, values: dict[str, SSAValue]) -> None:
        key = self.key(layer, kind)
        body = self.functions.get(key)
        if body is None:
            body = self.functions[key] = self.build(layer, kind, values, len(self.functions))
        body.layers.append(layer)
        operands = [values[body.carried[i]] if i in body.carried else self.argument(body, i, layer)
                    for i in range(len(body.fn.body.block.args))]
        call = CallOp(body.fn.sym_name.data, operands, list(body.fn.function_type.outputs.data))
        call.location = body.location
        self.phase.block.add_op(call)
        for name, result in zip(body.outputs, call.results, strict=True):
            result.name_hint = name
            values[name] = result

    def argument(self, body: LayerFunction, index: int, layer: int) -> SSAValue:
        """The phase's argument for the layer function's argument `index`, in `layer`."""
        circuit = self.phase.circuit
        spec = body.specs[index].renamed(circuit.prefix(body.representative), circuit.prefix(layer))
        if spec.tensor is not None:
            self.phase.used_tensors.add(spec.tensor)
        return self.phase.args.of(spec)

    def build(self, layer: int, kind: str, values: Mapping[str, SSAValue], number: int) -> LayerFunction:
        from v8dialect.builder.function import FunctionBuilder

        p = self.phase
        body = FunctionBuilder(p.circuit, p.manifest, p.registry, p.phase, p.tokens, p.kv_capacity,
                               in_layer_function=True, last_token_only=p.last_token_only)
        body.attention_contracts = p.attention_contracts
        first = next(op for op in p.circuit.block if op.in_layer(kind))
        location = body.location(first)
        inner = LayerValues(values, body.args, location)
        for op in p.circuit.block:
            if op.in_layer(kind):
                body.emit(op, inner, layer)
                if p.selects_rows(layer):
                    body.select_rows(op, inner)
        outputs = [name for name in inner.assigned if name in self.live]
        results = [inner[name] for name in outputs]
        body.block.add_op(ReturnOp(*results))
        prefix = p.circuit.prefix(layer)
        for arg in body.block.args:  # the layer function's own names: no layer prefix
            arg.name_hint = (arg.name_hint or "").removeprefix(prefix) or None
        fn = FuncOp(f"{p.phase}_layer{number}",
                    ([a.type for a in body.block.args], [r.type for r in results]),
                    Region(body.block), visibility="private",
                    arg_attrs=ArrayAttr([spec.attributes(tensor_name=False) for spec in body.args.specs]))
        if p.circuit.kind == "decoder" and p.phase == "prefill":
            fn.attributes[MAX_TOKENS_ATTR] = IntegerAttr(p.tokens, i64)
        return LayerFunction(fn, layer, inner.carried, outputs, body.args.specs, location)

    def finished(self) -> list[FuncOp]:
        """The layer functions, each marked with the layers that call it."""
        for body in self.functions.values():
            body.fn.attributes[LAYERS_ATTR] = ArrayAttr([IntegerAttr(i, i64) for i in body.layers])
        return [body.fn for body in self.functions.values()]
