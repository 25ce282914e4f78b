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
from dataclasses import dataclass, field, replace
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
OPTIONAL = (*CALL_FIELDS, "scratch", "lane_trees", "constraints", "emission", "description",
            "weight_prepare")
# The load-time preparation of a weight in a prepared layout: its prototypes, by role.
PREPARE_ARGS = (("dst", "void *"), ("dst_bytes", "size_t"), ("w", "const void *"), ("n", "int64_t"),
                ("k", "int64_t"))


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
class WeightPrepare:
    """How the weight a map reads is made once at load time from the file's plain rows:
    ``function(dst, dst_bytes, w, n, k)``, its threadpool form, and ``bytes(n, k)``."""

    layout: str
    function: str
    bytes: str
    threadpool: str = ""
    header: str = ""
    sources: tuple[str, ...] = ()
    root: str = ""  # the folder header and sources are relative to

    def source_paths(self) -> list[Path]:
        return [Path(self.root) / s for s in self.sources]


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
    weight_prepare: WeightPrepare | None = None

    def function(self, role: str) -> str:
        return self.functions.get(role, "")


@dataclass(frozen=True)
class KernelMapSet:
    maps: tuple[KernelMap, ...]
    roots: tuple[str, ...] = ()

    def get(self, map_id: str) -> KernelMap | None:
        return next((m for m in self.maps if m.id == map_id), None)

    def preparation(self, layout: str) -> WeightPrepare | None:
        """The load-time preparation of a prepared weight layout (every map reading that layout
        declares the same one; the loader checks it)."""
        return next((m.weight_prepare for m in self.maps
                     if m.weight_prepare is not None and m.weight_prepare.layout == layout), None)


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
    return _with_weight_prepare(kmap, node)


def _with_weight_prepare(kmap: KernelMap, node: Node) -> KernelMap:
    """A map reading a prepared weight layout declares its preparation; no other map does."""
    layout = kmap.layout.get("weight", "")
    prepared = vocab.PREPARED_LAYOUTS.get(layout)
    if not node.has("weight_prepare"):
        if prepared is not None:
            raise node.child("layout").child("weight").error(
                f"weight layout '{layout}' is made at load time: declare its 'weight_prepare'")
        return kmap
    spec = node.child("weight_prepare")
    if prepared is None:
        raise spec.error(f"weight layout '{layout}' is the file's own: a map reading it prepares "
                         f"nothing (prepared layouts: {', '.join(vocab.PREPARED_LAYOUTS)})")
    if kmap.emission != "call":
        raise spec.error("an inline map binds no C function; remove this field")
    if kmap.dtypes.get("weight") != prepared[0]:
        raise node.child("dtypes").child("weight").error(
            f"weight layout '{layout}' holds {prepared[0]} weights, not {kmap.dtypes.get('weight')}")
    spec.object(["function", "bytes"], ["threadpool"])
    if kmap.runtime == "threadpool" and not spec.has("threadpool"):
        raise spec.error("a threadpool map's weight preparation needs a 'threadpool' function")
    prepare = WeightPrepare(layout, spec.child("function").string(), spec.child("bytes").string(),
                            spec.child("threadpool").string() if spec.has("threadpool") else "",
                            kmap.header, kmap.sources)
    return replace(kmap, weight_prepare=prepare)


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
    _check_functions(kmap, abi, node)
    constants = abi.constants
    for i, selector in enumerate(kmap.selectors.values()):
        if selector not in constants:
            raise node.child("contracts").child(i).child("selector").error(
                f"selector constant '{selector}' is not defined in {kmap.header}")
    for source in kmap.sources:
        if not (maps_root / source).is_file():
            raise node.child("sources").error(f"source '{source}' not found under {maps_root}")


def _check_functions(kmap: KernelMap, abi: c_abi.CAbi, node: Node) -> None:
    """Bound, scratch and weight-preparation functions: declared with the prototypes they need."""
    for role in kmap.functions:
        _check_prototype(kmap, abi, role, node.child("functions").child(role))
    if kmap.scratch_function:
        _check_scratch_prototype(kmap, abi, node.child("scratch"))
    if kmap.weight_prepare is not None:
        _check_prepare_prototypes(kmap, kmap.weight_prepare, abi, node.child("weight_prepare"))


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


def _check_prepare_prototypes(kmap: KernelMap, prepare: WeightPrepare, abi: c_abi.CAbi,
                              node: Node) -> None:
    """v8_status function(void *dst, size_t dst_bytes, const void *w, int64_t n, int64_t k),
    the threadpool form with a leading v8_threadpool *pool, and size_t bytes(int64_t n, int64_t k)."""
    wanted = [("function", prepare.function, "v8_status", list(PREPARE_ARGS)),
              ("bytes", prepare.bytes, "size_t", list(PREPARE_ARGS[3:]))]
    if prepare.threadpool:
        wanted.append(("threadpool", prepare.threadpool, "v8_status",
                       [("pool", "v8_threadpool *"), *PREPARE_ARGS]))
    for role, name, returns, params in wanted:
        where = node.child(role)
        function = _declared(kmap, abi, name, where)
        expected = f"{returns} {name}({', '.join(c_abi.declarator(t, n) for n, t in params)})"
        same = (c_abi.same_ctype(function.returns, returns) and len(function.params) == len(params)
                and all(c_abi.same_ctype(p.ctype, t) and (not p.name or p.name == n or n == "pool")
                        for p, (n, t) in zip(function.params, params, strict=False)))
        if not same:
            raise where.error(f"'{name}' is declared at {function.where} as {function.prototype()}; "
                              f"a weight preparation's {role} is {expected}")


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
    preparations: dict[str, KernelMap] = {}  # prepared layout -> the first map declaring it
    for file, maps_root in map_files(locations):
        node = root(file)
        kmap = parse_map(node)
        if kmap.id in seen:
            raise node.child("id").error(f"duplicate kernel map id '{kmap.id}' (also in {seen[kmap.id]})")
        seen[kmap.id] = str(file)
        check_header(kmap, node, maps_root)
        check_contracts(kmap, node, registry)
        _check_one_preparation(kmap, node, preparations)
        if kmap.weight_prepare is not None:
            kmap = replace(kmap, weight_prepare=replace(kmap.weight_prepare, root=str(maps_root)))
        maps.append(kmap)
    return KernelMapSet(tuple(maps), tuple(str(p) for p in locations or [runtime_c_dir()]))


def _check_one_preparation(kmap: KernelMap, node: Node, preparations: dict[str, KernelMap]) -> None:
    """Every map reading one prepared layout makes it with the same functions: a program holds
    one prepared copy of a weight, whichever kernels read it."""
    prepare = kmap.weight_prepare
    if prepare is None:
        return
    first = preparations.setdefault(prepare.layout, kmap)
    assert first.weight_prepare is not None
    mine = (prepare.function, prepare.bytes, prepare.threadpool)
    theirs = (first.weight_prepare.function, first.weight_prepare.bytes, first.weight_prepare.threadpool)
    if mine != theirs:
        raise node.child("weight_prepare").error(
            f"layout '{prepare.layout}' is prepared by {'/'.join(theirs)} in {first.source}; "
            f"one layout has one preparation")


__all__ = ["DataError", "KernelMap", "KernelMapSet", "WeightPrepare", "load_kernel_maps"]
