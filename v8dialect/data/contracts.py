"""Contract registries: complete arithmetic profiles, validated on load.

A registry file (``contracts/*.json``, schema ``v8.contracts/1``) holds the
contracts of one family:

- ``attention``: the reduction of softmax(QK^T)V, field by field;
- ``linear``: quantized dot products (block formats, accumulators, lanes);
- ``op``: the other decoder ops (storage, compute, rounding points, reduction).

Attention and linear registries may also hold composites, which pick one of
two plain contracts of their own family by a declared selector and threshold
(attention: also a head-dimension condition; linear: both parts read the same
weight format).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from v8dialect.data import vocab
from v8dialect.data.jsondata import DataError, Node, root
from v8dialect.data.paths import contracts_dir

SCHEMA = "v8.contracts/1"
FAMILIES = ("attention", "linear", "op")
COMPOSITE_FAMILIES = ("attention", "linear")

FAMILY_FIELDS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "attention": vocab.ATTENTION_FIELDS,
    "linear": vocab.LINEAR_FIELDS,
    "op": vocab.OP_FIELDS,
}

COMMON_REQUIRED = ("id", "status", "description")
COMMON_OPTIONAL = ("evidence", "notes")

PartitionParam = int | str


@dataclass(frozen=True)
class Partition:
    kind: str
    reduction_order_effect: str
    params: tuple[tuple[str, PartitionParam], ...] = ()

    def param(self, name: str) -> PartitionParam | None:
        return dict(self.params).get(name)


@dataclass(frozen=True)
class Composite:
    """Run ``below`` while the selector's value is under ``threshold``, else ``at_or_above``.

    ``head_dim_multiple_of`` is the attention composite's second condition (the
    tiled part also needs the head dimension to be a multiple of it); a linear
    composite has none.
    """

    selector: str
    threshold: int
    head_dim_multiple_of: int | None
    below: str
    at_or_above: str


@dataclass(frozen=True)
class Contract:
    id: str
    family: str
    status: str
    description: str
    source: str  # "file: $.json.path", for diagnostics
    fields: tuple[tuple[str, str], ...] = ()
    partition: Partition | None = None
    op: str | None = None
    rounding_points: tuple[str, ...] = ()
    composite: Composite | None = None
    evidence: tuple[str, ...] = ()
    notes: str = ""

    @property
    def is_composite(self) -> bool:
        return self.composite is not None

    def field_value(self, name: str) -> str:
        return dict(self.fields)[name]

    @property
    def target_op(self) -> str:
        """The graph op this contract can be required by."""
        if self.family == "attention":
            return "attention"
        if self.family == "linear":
            return "linear"
        assert self.op is not None
        return self.op


@dataclass(frozen=True)
class ContractRegistry:
    contracts: Mapping[str, Contract] = field(default_factory=dict[str, Contract])
    files: tuple[str, ...] = ()

    def get(self, contract_id: str) -> Contract | None:
        return self.contracts.get(contract_id)

    def __contains__(self, contract_id: str) -> bool:
        return contract_id in self.contracts

    def parts(self, contract: Contract) -> tuple[Contract, ...]:
        if contract.composite is None:
            return ()
        return tuple(self.contracts[p] for p in (contract.composite.below, contract.composite.at_or_above))


# ---- parsing ---------------------------------------------------------------


def parse_partition(node: Node) -> Partition:
    node.object(["kind", "reduction_order_effect"], sorted(_all_partition_params()))
    kind = node.child("kind").word(tuple(vocab.PARTITION_KINDS))
    effect_node = node.child("reduction_order_effect")
    effect = effect_node.word(vocab.REDUCTION_ORDER_EFFECTS)
    expected = vocab.expected_effect(kind)
    if effect != expected:
        what = "independent-outputs" if expected == "none" else "chunked"
        raise effect_node.error(
            f"a {what} partition '{kind}' must declare reduction_order_effect "
            f"'{expected}', not '{effect}'"
        )
    allowed = vocab.PARTITION_KINDS[kind][1]
    params: list[tuple[str, PartitionParam]] = []
    for key, child in node.entries():
        if key in ("kind", "reduction_order_effect"):
            continue
        if key not in allowed:
            raise child.error(f"partition '{kind}' takes no parameter '{key}'")
        words = vocab.PARTITION_WORD_PARAMS.get(key)
        value: PartitionParam = child.word(words) if words else child.integer(minimum=1)
        params.append((key, value))
    missing = sorted(allowed - {k for k, _ in params})
    if missing:
        raise node.error(f"partition '{kind}' needs parameter '{missing[0]}'")
    return Partition(kind, effect, tuple(sorted(params)))


def _all_partition_params() -> set[str]:
    return {p for _, params in vocab.PARTITION_KINDS.values() for p in params}


def parse_fields(node: Node, spec: Mapping[str, tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    return tuple((name, node.child(name).word(words)) for name, words in spec.items())


def parse_contract_id(node: Node) -> str:
    contract_id = node.string()
    problem = vocab.loose_id_problem(contract_id)
    if problem:
        raise node.error(problem)
    return contract_id


def parse_contract(node: Node, family: str) -> Contract:
    is_composite = family in COMPOSITE_FAMILIES and node.has("composite")
    spec = FAMILY_FIELDS[family]
    if is_composite:
        required: list[str] = [*COMMON_REQUIRED, "composite"]
    else:
        required = [*COMMON_REQUIRED, *spec, "partition"]
        if family == "op":
            required += ["op", "rounding_points"]
    node.object(required, COMMON_OPTIONAL)
    common = dict(
        id=parse_contract_id(node.child("id")),
        family=family,
        status=node.child("status").word(vocab.STATUSES),
        description=node.child("description").string(),
        source=f"{node.file}: {node.path}",
        evidence=node.child("evidence").strings(nonempty=False) if node.has("evidence") else (),
        notes=node.child("notes").string() if node.has("notes") else "",
    )
    if common["status"] == "validated" and not common["evidence"]:
        raise node.child("status").error(
            "status 'validated' needs an 'evidence' list naming the ledger entries behind it"
        )
    if is_composite:
        composite = parse_composite(node.child("composite"), family)
        return Contract(**common, composite=composite)  # type: ignore[arg-type]
    contract = Contract(
        **common,  # type: ignore[arg-type]
        fields=parse_fields(node, spec),
        partition=parse_partition(node.child("partition")),
        op=node.child("op").word(vocab.DECODER_OPS) if family == "op" else None,
        rounding_points=(
            node.child("rounding_points").strings(vocab.ROUNDING_POINTS) if family == "op" else ()
        ),
    )
    check_family_rules(contract, node)
    return contract


def parse_composite(node: Node, family: str = "attention") -> Composite:
    fields = ["selector", "threshold", "below", "at_or_above"]
    if family == "attention":
        fields.insert(2, "head_dim_multiple_of")
    node.object(fields)
    return Composite(
        selector=node.child("selector").word(vocab.COMPOSITE_SELECTORS),
        threshold=node.child("threshold").integer(minimum=1),
        head_dim_multiple_of=(
            node.child("head_dim_multiple_of").integer(minimum=1) if family == "attention" else None
        ),
        below=parse_contract_id(node.child("below")),
        at_or_above=parse_contract_id(node.child("at_or_above")),
    )


def check_family_rules(contract: Contract, node: Node) -> None:
    """Rules that tie fields to the partition: chunked work must say how partials merge."""
    assert contract.partition is not None
    kind = contract.partition.kind
    fields = dict(contract.fields)
    if contract.family == "linear":
        chunked = kind == "split_k"
        if chunked and fields["merge_order"] == "none":
            raise node.child("merge_order").error(
                "a split-K contract must declare its merge order (e.g. 'ascending')"
            )
        if chunked and fields["partial_accumulator"] == "none":
            raise node.child("partial_accumulator").error(
                "a split-K contract must declare its partial accumulator (e.g. 'fp32')"
            )
        if not chunked and (fields["merge_order"], fields["partial_accumulator"]) != ("none", "none"):
            raise node.child("merge_order").error(
                f"partition '{kind}' has no partials: partial_accumulator and merge_order must be 'none'"
            )
    if contract.family == "attention" and kind == "kv_chunks_by_workers":
        for name in ("partial_storage", "partial_merge"):
            if fields[name] == "none":
                raise node.child(name).error(
                    f"a kv_chunks_by_workers contract must declare its {name.replace('_', ' ')}"
                )


def parse_registry_file(file: Path) -> list[Contract]:
    doc = root(file).object(["schema", "family", "contracts"], ["description"])
    schema = doc.child("schema")
    if schema.string() != SCHEMA:
        raise schema.error(f"unsupported schema '{schema.value}' (expected '{SCHEMA}')")
    family = doc.child("family").word(FAMILIES)
    return [parse_contract(entry, family) for entry in doc.child("contracts").items()]


# ---- whole-registry rules --------------------------------------------------


def registry_files(locations: Sequence[Path] | None = None) -> list[Path]:
    """JSON files named directly, or every *.json in named folders."""
    found: list[Path] = []
    for location in locations or [contracts_dir()]:
        if location.is_dir():
            found.extend(sorted(location.glob("*.json")))
        else:
            found.append(location)
    return found


def load_registry(locations: Sequence[Path] | None = None) -> ContractRegistry:
    files = registry_files(locations)
    contracts: dict[str, Contract] = {}
    for file in files:
        for contract in parse_registry_file(file):
            if contract.id in contracts:
                first = contracts[contract.id].source
                raise DataError(file, contract.source.split(": ", 1)[1],
                                f"duplicate contract id '{contract.id}' (first defined at {first})")
            contracts[contract.id] = contract
    check_composites(contracts.values(), contracts)
    return ContractRegistry(contracts, tuple(str(f) for f in files))


def check_composites(candidates: Iterable[Contract], contracts: Mapping[str, Contract]) -> None:
    for contract in candidates:
        if contract.composite is None:
            continue
        file, path = contract.source.split(": ", 1)
        for role in ("below", "at_or_above"):
            part_id = getattr(contract.composite, role)
            part = contracts.get(part_id)
            where = f"{path}.composite.{role}"
            if part is None:
                raise DataError(file, where,
                                f"composite '{contract.id}' references missing contract '{part_id}'")
            if part.is_composite or part.family != contract.family:
                raise DataError(file, where,
                                f"composite part '{part_id}' must be a plain {contract.family} contract")
            if part.family == "linear" and contract.family == "linear":
                first = contracts.get(contract.composite.below)
                if first is not None and not first.is_composite and (
                        part.field_value("weight_format") != first.field_value("weight_format")):
                    raise DataError(
                        file, where,
                        f"composite '{contract.id}' mixes weight formats: part '{part_id}' reads "
                        f"{part.field_value('weight_format')}, part '{first.id}' reads "
                        f"{first.field_value('weight_format')}",
                    )
            if vocab.STATUSES.index(part.status) < vocab.STATUSES.index(contract.status):
                raise DataError(
                    file, where,
                    f"composite '{contract.id}' claims status '{contract.status}' but its part "
                    f"'{part_id}' is only '{part.status}'",
                )
