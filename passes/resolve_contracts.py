"""resolve-contracts: bind every contract-bearing op to exactly one provider.

For each GraphIR op the pass matches op kind, phase, dtypes, layout, shape
constraints, execution requirement and the complete contract id against the
kernel maps.  No provider is an *unsupported* error that shows the
requirement and the nearest providers with the fields that differ; more than
one is an *ambiguous* error listing every match.  Nothing ranks providers:
no priority, benchmark, environment variable or legacy override takes part.
Prefill and decode resolve independently.

The chosen provider is recorded on the op as ``resolved`` and on the module
in the resolution ledger.  In ``production`` mode any provider, contract or
requirement that is not ``validated`` is an error; in ``bringup`` mode those
gaps are recorded as ``blockers`` on the resolved attribute.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from v8passes.v8_pass import Pinning, V8Pass
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr

from v8dialect.data.contracts import Contract, ContractRegistry
from v8dialect.data.kernel_maps import KernelMap, KernelMapSet, WorkPartition
from v8dialect.data.pipeline_data import pipeline_data
from v8dialect.diagnostics import V8Error, op_error
from v8dialect.ir.contract_ir import differences
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.ledger import graph_ops, node_key, write_ledger
from v8dialect.ir.resolution_attrs import ExecutionAttr, ResolvedAttr

MODES = ("bringup", "production")
NEAREST_SHOWN = 3


class ResolutionError(Exception):
    """One op could not be resolved; the message is shown at the op."""


@dataclass(frozen=True)
class Requirement:
    """What an op asks of a provider, in the kernel maps' terms."""

    op: str
    phase: str
    contract: str
    dtypes: dict[str, str]
    layout: dict[str, str]

    @staticmethod
    def of(op: GraphOp) -> Requirement:
        return Requirement(op.KERNEL_OP, op.phase_name, op.required_contract.id,
                           dict(op.dtypes()), dict(op.layout()))

    def key(self) -> Hashable:
        """Equal for requirements every map matches alike (the dicts' order is not significant)."""
        return (self.op, self.phase, self.contract, frozenset(self.dtypes.items()),
                frozenset(self.layout.items()))

    def describe(self) -> str:
        dtypes = ", ".join(f"{k}={v}" for k, v in self.dtypes.items())
        layout = ", ".join(f"{k}={v}" for k, v in self.layout.items())
        return (f"op={self.op} phase={self.phase} contract={self.contract} "
                f"dtypes({dtypes}) layout({layout})")


def mismatches(op: GraphOp, need: Requirement, kmap: KernelMap) -> list[str]:
    """Every field in which kmap fails to provide what op needs, as 'field: need vs map'."""
    found = requirement_mismatches(need, kmap)
    found += [f"constraint: {p}" for p in op.constraint_problems(kmap.constraints)]
    return found + execution_mismatches(execution_words(op), kmap)


def requirement_mismatches(need: Requirement, kmap: KernelMap) -> list[str]:
    """The fields of the requirement alone (not the op's shapes) that kmap does not provide."""
    found: list[str] = []
    if kmap.op != need.op:
        found.append(f"op: {need.op} vs {kmap.op}")
    if need.phase not in kmap.phases:
        found.append(f"phase: {need.phase} vs {'/'.join(kmap.phases)}")
    if need.contract not in kmap.selectors:
        found.append(f"contract: {need.contract} vs {'/'.join(kmap.selectors)}")
    for kind, wanted, offered in (("dtypes", need.dtypes, kmap.dtypes), ("layout", need.layout, kmap.layout)):
        for role, value in wanted.items():
            if offered.get(role) != value:
                found.append(f"{kind}.{role}: {value} vs {offered.get(role, 'absent')}")
    return found


def execution_words(op: GraphOp) -> tuple[str, str] | None:
    """(runtime, partition) of the op's execution requirement, if it states one."""
    if op.execution is None:
        return None
    return op.execution.word("runtime"), op.execution.word("partition")


def execution_mismatches(execution: tuple[str, str] | None, kmap: KernelMap) -> list[str]:
    if execution is None:
        return []
    found: list[str] = []
    runtime, partition = execution
    if runtime != kmap.runtime:
        found.append(f"execution.runtime: {runtime} vs {kmap.runtime}")
    if partition not in (p.kind for p in kmap.work_partitions):
        offered_kinds = "/".join(p.kind for p in kmap.work_partitions)
        found.append(f"execution.partition: {partition} vs {offered_kinds}")
    return found


@dataclass(frozen=True)
class Resolver:
    registry: ContractRegistry
    maps: KernelMapSet
    production: bool
    # A model repeats a few requirements over many ops (every layer's q projection asks the
    # same), so the maps are matched once per distinct requirement; only the op's shape
    # constraints are checked per op, against the maps that passed.
    _candidates: dict[Hashable, list[KernelMap]] = field(default_factory=dict[Hashable, list[KernelMap]],
                                                         init=False, repr=False, compare=False)
    _contracts: dict[Hashable, Contract | str] = field(default_factory=dict[Hashable, Contract | str],
                                                       init=False, repr=False, compare=False)

    def candidates(self, need: Requirement, execution: tuple[str, str] | None) -> list[KernelMap]:
        """The maps that provide need and execution, shape constraints aside."""
        key = (need.key(), execution)
        found = self._candidates.get(key)
        if found is None:
            found = [m for m in self.maps.maps
                     if not requirement_mismatches(need, m) and not execution_mismatches(execution, m)]
            self._candidates[key] = found
        return found

    def resolve(self, op: GraphOp) -> ResolvedAttr:
        contract = self.checked_contract(op)
        need = Requirement.of(op)
        matches = [m for m in self.candidates(need, execution_words(op))
                   if not op.constraint_problems(m.constraints)]
        if not matches:
            scored = [(mismatches(op, need, m), m) for m in self.maps.maps]
            raise ResolutionError(unsupported_message(need, scored))
        if len(matches) > 1:
            listed = "; ".join(f"'{m.id}' ({m.source})" for m in matches)
            raise ResolutionError(f"ambiguous: {len(matches)} providers deliver {need.describe()}: {listed}")
        kmap = matches[0]
        blockers = self.blockers(op, contract, kmap)
        if self.production and blockers:
            raise ResolutionError(production_refusal(contract, kmap, op, blockers))
        return resolved_attr(kmap, contract, choose_partition(op, kmap), blockers)

    def checked_contract(self, op: GraphOp) -> Contract:
        """The registry's contract for the op's, checked once per distinct contract attribute."""
        attr = op.required_contract
        key = (attr, op.KERNEL_OP, op.name)
        if key not in self._contracts:
            try:
                self._contracts[key] = self._checked_contract(op)
            except ResolutionError as e:
                self._contracts[key] = str(e)
        found = self._contracts[key]
        if isinstance(found, str):
            raise ResolutionError(found)
        return found

    def _checked_contract(self, op: GraphOp) -> Contract:
        attr = op.required_contract
        contract = self.registry.get(attr.id)
        if contract is None:
            raise ResolutionError(
                f"unknown contract '{attr.id}': not in the registry ({', '.join(self.registry.files)})")
        if contract.target_op not in (op.KERNEL_OP, op.name.removeprefix("v8.")):
            raise ResolutionError(f"contract '{attr.id}' is for op '{contract.target_op}'")
        diffs = differences(attr, contract, self.registry)  # type: ignore[arg-type]
        if diffs:
            raise ResolutionError(
                f"contract '{attr.id}' in the IR differs from the registry ({contract.source}): "
                + "; ".join(diffs))
        return contract

    def blockers(self, op: GraphOp, contract: Contract, kmap: KernelMap) -> list[str]:
        found: list[str] = []
        if op.requirement is None:
            found.append("requirement_missing")
        elif op.requirement.word("status") != "validated":
            found.append("requirement_not_validated")
        if contract.status != "validated":
            found.append("contract_not_validated")
        if any(p.status != "validated" for p in self.registry.parts(contract)):
            found.append("contract_part_not_validated")
        if kmap.status != "validated":
            found.append("provider_not_validated")
        return found


def unsupported_message(need: Requirement, scored: Sequence[tuple[list[str], KernelMap]]) -> str:
    if not scored:
        return f"unsupported: no kernel maps loaded; required {need.describe()}"
    nearest = sorted(scored, key=lambda s: (len(s[0]), s[1].id))[:NEAREST_SHOWN]
    shown = "; ".join(f"'{m.id}' differs in {', '.join(diffs)}" for diffs, m in nearest)
    return f"unsupported: no provider delivers {need.describe()}; nearest: {shown}"


def production_refusal(contract: Contract, kmap: KernelMap, op: GraphOp, blockers: list[str]) -> str:
    reasons: list[str] = []
    for blocker in blockers:
        match blocker:
            case "requirement_missing":
                reasons.append("the op has no circuit requirement")
            case "requirement_not_validated":
                assert op.requirement is not None
                reasons.append(f"requirement from '{op.requirement.lead}' is "
                               f"'{op.requirement.word('status')}'")
            case "contract_not_validated":
                reasons.append(f"contract '{contract.id}' is '{contract.status}'")
            case "contract_part_not_validated":
                reasons.append(f"a part of composite '{contract.id}' is not validated")
            case _:
                reasons.append(f"provider '{kmap.id}' is '{kmap.status}'")
    return "production mode refuses: " + "; ".join(reasons)


def choose_partition(op: GraphOp, kmap: KernelMap) -> WorkPartition:
    if op.execution is not None:
        wanted = op.execution.word("partition")
        return next(p for p in kmap.work_partitions if p.kind == wanted)
    if len(kmap.work_partitions) == 1:
        return kmap.work_partitions[0]
    offered = ", ".join(p.kind for p in kmap.work_partitions)
    raise ResolutionError(
        f"provider '{kmap.id}' offers several work partitions ({offered}); the op must name one "
        "with `execution #v8.exec_requirement<runtime = ..., partition = ...>`")


def resolved_attr(kmap: KernelMap, contract: Contract, partition: WorkPartition,
                  blockers: list[str]) -> ResolvedAttr:
    execution = ExecutionAttr(
        StringAttr(kmap.isa_dispatch),
        ArrayAttr([StringAttr(v) for v in kmap.isa_variants]),
        StringAttr(kmap.runtime),
        StringAttr(partition.kind),
        StringAttr(partition.reduction_order_effect),
    )
    threadpool = kmap.function("threadpool") if kmap.runtime == "threadpool" else ""
    return ResolvedAttr(
        StringAttr(kmap.id),
        StringAttr(contract.id),
        StringAttr(kmap.selectors[contract.id]),
        StringAttr(kmap.emission),
        StringAttr(kmap.function("oracle")),
        StringAttr(kmap.function("production")),
        StringAttr(threadpool),
        execution,
        ArrayAttr([StringAttr(b) for b in blockers]),
    )


@dataclass(frozen=True)
class ResolveContracts(V8Pass):
    """Pick exactly one provider per contract-bearing op, or fail before any C exists."""

    name = "resolve-contracts"

    pinned_before = Pinning.UNCHECKED  # it writes the ledger the later stages check

    registry: str | None = None
    """Contract registry files or folders, comma-separated (default: the packaged registries)."""

    kernel_maps: str | None = None
    """Kernel map files or folders, comma-separated (default: the packaged runtime_c)."""

    mode: str = "bringup"
    """'bringup' records status blockers; 'production' refuses anything not validated."""

    def load(self, ctx: Context | None = None) -> Resolver:
        """The resolver over the data this pass names, loaded once per pipeline (pipeline_data):
        every later pass of the pipeline binds against the same loaded maps."""
        if self.mode not in MODES:
            raise V8Error([f"<pass>: error: resolve-contracts mode must be one of {', '.join(MODES)}, "
                           f"not '{self.mode}'"])
        data = pipeline_data(ctx)
        data.select(registry=self.registry, kernel_maps=self.kernel_maps)
        return Resolver(data.registry(), data.kernel_maps(), production=self.mode == "production")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        resolver = self.load(ctx)
        ledger: dict[str, ResolvedAttr] = {}
        errors: list[str] = []
        for graph_op in graph_ops(op):
            key = node_key(graph_op)
            if key in ledger:
                errors.append(op_error(graph_op, f"node name '{key}' is used twice in one function"))
                continue
            try:
                resolved = resolver.resolve(graph_op)
            except ResolutionError as e:
                errors.append(op_error(graph_op, str(e)))
                continue
            if graph_op.resolved is not None and graph_op.resolved != resolved:
                errors.append(op_error(graph_op, "was already resolved to "
                                       f"'{graph_op.resolved.word('kernel')}' and now resolves to "
                                       f"'{resolved.word('kernel')}': a resolution never changes"))
                continue
            graph_op.properties["resolved"] = resolved
            ledger[key] = resolved
        if errors:
            raise V8Error(errors)
        write_ledger(op, ledger)
        # later stages bind ABIs from the same maps the ledger was resolved against
        if self.kernel_maps:
            op.attributes["v8.kernel_maps"] = StringAttr(self.kernel_maps)
        if self.registry:
            op.attributes["v8.registry"] = StringAttr(self.registry)
