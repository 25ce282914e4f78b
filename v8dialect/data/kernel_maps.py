"""Kernel maps: what each C implementation delivers, read strictly.

A map (``*.kmap.json``, schema ``v8.kernel_map/1``) sits beside the C it
describes.  See runtime_c/README.md for the fields.  Loading checks the schema
and vocabularies, that ids are unique, that every contract exists in the
registry, that every bound function is declared in the map's header with the
map's ABI and every selector is an enum constant of it (``c_abi`` parses the
header), and that each work partition's reduction-order effect agrees
with the partition of the contracts the map delivers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from v8dialect.data import c_abi, vocab
from v8dialect.data.contracts import ContractRegistry
from v8dialect.data.jsondata import DataError, Node, root
from v8dialect.data.paths import runtime_c_dir
from v8dialect.ops.registry import OP_KINDS

SCHEMA = "v8.kernel_map/1"
MAP_GLOB = "*.kmap.json"

REQUIRED = ("schema", "id", "op", "phases", "dtypes", "layout", "contracts", "isa_dispatch",
            "threading", "status")
CALL_FIELDS = ("functions", "header", "sources", "abi")
OPTIONAL = (*CALL_FIELDS, "scratch", "lane_trees", "constraints", "emission", "description")


@dataclass(frozen=True)
class WorkPartition:
    kind: str
    reduction_order_effect: str


@dataclass(frozen=True)
class AbiArg:
    name: str
    ctype: str
    role: str


@dataclass(frozen=True)
class KernelMap:
    id: str
    op: str
    phases: tuple[str, ...]
    dtypes: Mapping[str, str]
    layout: Mapping[str, str]
    selectors: Mapping[str, str]  # contract id -> C selector constant
    isa_dispatch: str
    isa_variants: tuple[str, ...]
    runtime: str
    dispatch: str
    work_partitions: tuple[WorkPartition, ...]
    status: str
    source: str  # the map file, for diagnostics
    emission: str = "call"
    functions: Mapping[str, str] = field(default_factory=dict[str, str])
    header: str = ""
    sources: tuple[str, ...] = ()
    abi_returns: str = ""
    abi_args: tuple[AbiArg, ...] = ()
    constraints: Mapping[str, int] = field(default_factory=dict[str, int])
    scratch_function: str = ""
    scratch_args: tuple[str, ...] = ()
    lane_trees: Mapping[str, str] = field(default_factory=dict[str, str])

    def function(self, role: str) -> str:
        return self.functions.get(role, "")


@dataclass(frozen=True)
class KernelMapSet:
    maps: tuple[KernelMap, ...]
    roots: tuple[str, ...] = ()

    def get(self, map_id: str) -> KernelMap | None:
        return next((m for m in self.maps if m.id == map_id), None)


# ---- parsing -----------------------------------------------------------------


def parse_map(node: Node) -> KernelMap:
    node.object(REQUIRED, OPTIONAL)
    schema = node.child("schema")
    if schema.string() != SCHEMA:
        raise schema.error(f"unsupported schema '{schema.value}' (expected '{SCHEMA}')")
    op = node.child("op").word(vocab.KERNEL_OPS)
    emission = node.child("emission").word(vocab.EMISSIONS) if node.has("emission") else "call"
    isa = node.child("isa_dispatch").object(["kind", "variants"])
    threading = node.child("threading").object(["runtime", "work_partitions"], ["dispatch"])
    kmap = KernelMap(
        id=_map_id(node.child("id")),
        op=op,
        phases=node.child("phases").strings(vocab.PHASES),
        dtypes=_role_words(node.child("dtypes"), op, vocab.DTYPES),
        layout=_role_words(node.child("layout"), op, vocab.LAYOUTS),
        selectors=_selectors(node.child("contracts")),
        isa_dispatch=isa.child("kind").word(vocab.ISA_DISPATCH_KINDS),
        isa_variants=isa.child("variants").strings(vocab.ISA_VARIANTS),
        runtime=threading.child("runtime").word(vocab.THREADING_RUNTIMES),
        dispatch=threading.child("dispatch").string() if threading.has("dispatch") else "",
        work_partitions=tuple(_partition(p) for p in threading.child("work_partitions").items()),
        status=node.child("status").word(vocab.STATUSES),
        source=str(node.file),
        emission=emission,
        constraints=_constraints(node.child("constraints")) if node.has("constraints") else {},
        lane_trees=_lane_trees(node.child("lane_trees")) if node.has("lane_trees") else {},
        **(_call_binding(node) if emission == "call" else _no_call_binding(node)),
    )
    _check_threading(kmap, node)
    _check_scratch(kmap, node)
    return kmap


def _check_scratch(kmap: KernelMap, node: Node) -> None:
    known = {a.name for a in kmap.abi_args} | {"n_workers"}
    for i, name in enumerate(kmap.scratch_args):
        if name not in known:
            raise node.child("scratch").child("args").child(i).error(
                f"'{name}' is neither an ABI argument nor n_workers")


def _map_id(node: Node) -> str:
    text = node.string()
    if not re.fullmatch(r"[a-z][a-z0-9_.]*", text):
        raise node.error(f"'{text}' is not a kernel map id (lower-case words, '_' and '.')")
    return text


def _role_words(node: Node, op: str, words: Sequence[str]) -> dict[str, str]:
    kind = OP_KINDS[op]  # op is a word of vocab.KERNEL_OPS, and every such word is a kind
    roles = kind.roles
    node.object(roles)
    return {role: node.child(role).word(words) for role in roles}


def _selectors(node: Node) -> dict[str, str]:
    selectors: dict[str, str] = {}
    for entry in node.items():
        entry.object(["id", "selector"])
        contract_id = entry.child("id").string()
        problem = vocab.loose_id_problem(contract_id)
        if problem:
            raise entry.child("id").error(problem)
        if contract_id in selectors:
            raise entry.child("id").error(f"contract '{contract_id}' listed twice")
        selector = entry.child("selector")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", selector.string()):
            raise selector.error(f"'{selector.value}' is not a C constant name")
        selectors[contract_id] = selector.string()
    if not selectors:
        raise node.error("a kernel map must deliver at least one contract")
    return selectors


def _partition(node: Node) -> WorkPartition:
    node.object(["kind", "reduction_order_effect"])
    kind = node.child("kind").word(vocab.WORK_PARTITIONS)
    effect_node = node.child("reduction_order_effect")
    effect = effect_node.word(vocab.REDUCTION_ORDER_EFFECTS)
    expected = vocab.expected_effect(kind)
    if effect != expected:
        raise effect_node.error(
            f"work partition '{kind}' has reduction_order_effect '{expected}', not '{effect}'"
        )
    return WorkPartition(kind, effect)


def _lane_trees(node: Node) -> dict[str, str]:
    """The dot-product lane tree each ISA variant computes, named (contracts may defer to it)."""
    node.object([], vocab.ISA_VARIANTS)
    return {variant: child.string() for variant, child in node.entries()}


def _constraints(node: Node) -> dict[str, int]:
    node.object([], vocab.MAP_CONSTRAINTS)
    return {key: child.integer(minimum=1) for key, child in node.entries()}


class _CallBinding(TypedDict, total=False):
    """The KernelMap fields a map with emission "call" binds (absent ones keep their defaults)."""

    functions: Mapping[str, str]
    header: str
    sources: tuple[str, ...]
    abi_returns: str
    abi_args: tuple[AbiArg, ...]
    scratch_function: str
    scratch_args: tuple[str, ...]


def _call_binding(node: Node) -> _CallBinding:
    node.object(REQUIRED + CALL_FIELDS, OPTIONAL)
    functions = node.child("functions").object(["oracle", "production"], ["threadpool"])
    abi = node.child("abi").object(["returns", "args"])
    binding = _CallBinding(
        functions={role: child.string() for role, child in functions.entries()},
        header=node.child("header").string(),
        sources=node.child("sources").strings(nonempty=False),
        abi_returns=abi.child("returns").string(),
        abi_args=tuple(_abi_arg(a) for a in abi.child("args").items()),
    )
    binding.update(_scratch(node))
    return binding


def _scratch(node: Node) -> _CallBinding:
    """How many scratch bytes a call needs: a header function and the ABI names it takes."""
    if not node.has("scratch"):
        return {}
    spec = node.child("scratch").object(["function", "args"])
    return _CallBinding(scratch_function=spec.child("function").string(),
                        scratch_args=spec.child("args").strings(nonempty=False))


def _no_call_binding(node: Node) -> _CallBinding:
    present = [f for f in CALL_FIELDS if node.has(f)]
    if present:
        raise node.child(present[0]).error("an inline map binds no C function; remove this field")
    return {}


def _abi_arg(node: Node) -> AbiArg:
    node.object(["name", "ctype", "role"])
    return AbiArg(node.child("name").string(), node.child("ctype").string(),
                  node.child("role").word(vocab.ABI_ROLES))


def _check_threading(kmap: KernelMap, node: Node) -> None:
    threading = node.child("threading")
    if kmap.runtime == "threadpool":
        if kmap.emission == "call" and not kmap.function("threadpool"):
            raise node.child("functions").error("threading runtime 'threadpool' needs a 'threadpool' function")
        if kmap.dispatch != "v8_parallel_for":
            raise threading.error("threading runtime 'threadpool' needs dispatch 'v8_parallel_for'")
    elif kmap.function("threadpool"):
        raise node.child("functions").child("threadpool").error(
            "a serial map binds no threadpool function")


# ---- cross checks --------------------------------------------------------------


def check_header(kmap: KernelMap, node: Node, maps_root: Path) -> None:
    """The map's header declares every bound function with the map's ABI, and every selector."""
    if kmap.emission != "call":
        return
    header = maps_root / kmap.header
    if not header.is_file():
        raise node.child("header").error(f"header '{kmap.header}' not found under {maps_root}")
    try:
        abi = c_abi.parse_headers([header.resolve()], (maps_root.resolve(), *c_abi.default_include_dirs()))
    except c_abi.CAbiError as e:
        raise node.child("header").error(str(e)) from e
    for role in kmap.functions:
        _check_prototype(kmap, abi, role, node.child("functions").child(role))
    if kmap.scratch_function:
        _check_scratch_prototype(kmap, abi, node.child("scratch"))
    constants = abi.constants
    for i, selector in enumerate(kmap.selectors.values()):
        if selector not in constants:
            raise node.child("contracts").child(i).child("selector").error(
                f"selector constant '{selector}' is not defined in {kmap.header}")
    for source in kmap.sources:
        if not (maps_root / source).is_file():
            raise node.child("sources").error(f"source '{source}' not found under {maps_root}")


def _declared(kmap: KernelMap, abi: c_abi.CAbi, name: str, where: Node) -> c_abi.CFunction:
    function = abi.functions.get(name)
    if function is None:
        raise where.error(f"function '{name}' is not declared in {kmap.header}")
    return function


def _check_prototype(kmap: KernelMap, abi: c_abi.CAbi, role: str, where: Node) -> None:
    """The prototype takes the ABI's arguments (the pool first for a threadpool function)."""
    function = _declared(kmap, abi, kmap.function(role), where)
    expected = [("pool", "v8_threadpool *")] if role == "threadpool" else []
    expected += [(a.name, a.ctype) for a in kmap.abi_args]
    declared = f"declared at {function.where} as {function.prototype()}"
    if not c_abi.same_ctype(function.returns, kmap.abi_returns):
        raise where.error(f"'{function.name}' returns {function.returns}, the map's abi says "
                          f"{kmap.abi_returns} ({declared})")
    if len(function.params) != len(expected):
        raise where.error(f"'{function.name}' takes {len(function.params)} arguments, the map's abi "
                          f"{len(expected)} ({declared})")
    for i, (param, (name, ctype)) in enumerate(zip(function.params, expected, strict=True)):
        arg = f"argument {i + 1} of '{function.name}'"
        if not c_abi.same_ctype(param.ctype, ctype):
            raise where.error(f"{arg} is {c_abi.declarator(param.ctype, param.name)}, the map's abi "
                              f"says {c_abi.declarator(ctype, name)} ({declared})")
        if param.name and param.name != name and not (role == "threadpool" and i == 0):
            raise where.error(f"{arg} is named '{param.name}', the map's abi says '{name}' ({declared})")


def _check_scratch_prototype(kmap: KernelMap, abi: c_abi.CAbi, node: Node) -> None:
    """The scratch-size function takes the map's scratch args, in order, and returns size_t."""
    function = _declared(kmap, abi, kmap.scratch_function, node.child("function"))
    names = [p.name for p in function.params]  # an unnamed parameter matches any name
    takes_args = len(names) == len(kmap.scratch_args) and all(
        not name or name == arg for name, arg in zip(names, kmap.scratch_args, strict=True))
    if not c_abi.same_ctype(function.returns, "size_t") or not takes_args:
        raise node.error(f"'{function.name}' is declared at {function.where} as "
                         f"{function.prototype()}; the map's scratch says size_t "
                         f"{function.name}({', '.join(kmap.scratch_args)})")


def check_contracts(kmap: KernelMap, node: Node, registry: ContractRegistry) -> None:
    """Delivered contracts exist, serve this op, and agree with the map's partitions."""
    for i, contract_id in enumerate(kmap.selectors):
        where = node.child("contracts").child(i).child("id")
        contract = registry.get(contract_id)
        if contract is None:
            raise where.error(f"contract '{contract_id}' is not in the registry")
        if contract.target_op not in (kmap.op, _kernel_op_alias(kmap.op)):
            raise where.error(f"contract '{contract_id}' is for op '{contract.target_op}', not '{kmap.op}'")
        parts = registry.parts(contract) or (contract,)
        for part in parts:
            assert part.partition is not None
            _check_partition_agreement(kmap, part.id, part.partition.kind, node)
            _check_lane_trees(kmap, part.id, dict(part.fields).get("dot_order"), node)


def _check_lane_trees(kmap: KernelMap, contract_id: str, dot_order: str | None, node: Node) -> None:
    """A contract that leaves the lane tree to its provider needs the provider to name it."""
    if dot_order != "isa_lane_tree_named_by_provider":
        return
    missing = [v for v in kmap.isa_variants if v not in kmap.lane_trees]
    if missing:
        raise node.error(f"contract '{contract_id}' leaves the dot-product lane tree to its provider: "
                         f"name it under lane_trees for {', '.join(missing)}")


def _kernel_op_alias(op: str) -> str:
    # a logits projection is a linear op in the vocabulary's role
    return "logits" if op == "linear" else op


def _check_partition_agreement(kmap: KernelMap, contract_id: str, contract_kind: str, node: Node) -> None:
    chunked = vocab.expected_effect(contract_kind) == "contract_defined"
    for j, wp in enumerate(kmap.work_partitions):
        where = node.child("threading").child("work_partitions").child(j)
        if wp.reduction_order_effect == "contract_defined" and wp.kind != contract_kind:
            raise where.error(
                f"partition '{wp.kind}' changes reduction order, but contract '{contract_id}' "
                f"declares partition '{contract_kind}'")
        # 'serial' runs one chunk, which a chunked contract allows only when nothing can
        # schedule more: a serial runtime.  A threadpool map must declare the chunking.
        serial_only = wp.kind == "serial" and kmap.runtime == "serial"
        if chunked and wp.reduction_order_effect == "none" and not serial_only:
            raise where.error(
                f"contract '{contract_id}' defines its chunking ('{contract_kind}'); "
                f"an independent-outputs partition '{wp.kind}' cannot deliver it")


def map_files(locations: Sequence[Path] | None = None) -> list[tuple[Path, Path]]:
    """(map file, root its header paths are relative to) for every map found."""
    found: list[tuple[Path, Path]] = []
    for location in locations or [runtime_c_dir()]:
        if location.is_dir():
            found += [(f, location) for f in sorted(location.rglob(MAP_GLOB))]
        else:
            found.append((location, location.parent))
    return found


def load_kernel_maps(registry: ContractRegistry, locations: Sequence[Path] | None = None) -> KernelMapSet:
    maps: list[KernelMap] = []
    seen: dict[str, str] = {}
    for file, maps_root in map_files(locations):
        node = root(file)
        kmap = parse_map(node)
        if kmap.id in seen:
            raise node.child("id").error(f"duplicate kernel map id '{kmap.id}' (also in {seen[kmap.id]})")
        seen[kmap.id] = str(file)
        check_header(kmap, node, maps_root)
        check_contracts(kmap, node, registry)
        maps.append(kmap)
    return KernelMapSet(tuple(maps), tuple(str(p) for p in locations or [runtime_c_dir()]))


__all__ = ["DataError", "KernelMap", "KernelMapSet", "load_kernel_maps"]
