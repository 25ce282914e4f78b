"""Loading a circuit: its JSON read strictly (``circuit_reader``), then the rules of a whole
circuit and what it needs from the rest of the compiler.

Dataflow is checked per layer kind, and a decoder has one active decode attention
requirement per attention layer.  A contract the registry lacks, or an op kind the IR
cannot express yet, is a *gap*; every gap is reported together, so a circuit
written ahead of its contracts fails loudly instead of building half a model.
The data model is ``circuit_model``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from v8dialect.data.circuit_model import SELECTOR_VALUES, Choice, Circuit, OpTemplate
from v8dialect.data.circuit_reader import NO_GRAPH_OP, PLANNED_OPS, parse_circuit
from v8dialect.data.contracts import ContractRegistry
from v8dialect.data.jsondata import DataError, Node, json_positions, utf8_problem
from v8dialect.data.paths import circuits_dir

# Contract families a circuit op kind accepts (logits may be a quantized linear).
TARGET_OPS: Mapping[str, tuple[str, ...]] = {"logits": ("logits", "linear")}


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
