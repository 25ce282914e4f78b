"""Between registry contracts and their IR attributes.

The IR states a contract in full; the registry is the authority on what an id
means.  ``to_attr`` builds the attribute a circuit or a test writes into the
IR, and ``differences`` names every field where an IR attribute and the
registry disagree, so the resolver can refuse a contract that was edited by
hand.
"""

from __future__ import annotations

import os
from pathlib import Path

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute

from v8dialect.data.contracts import Contract, ContractRegistry, Partition
from v8dialect.ir.contract_attrs import (
    AnyContractAttr,
    AttentionContractAttr,
    CompositeContractAttr,
    LinearCompositeContractAttr,
    LinearContractAttr,
    OpContractAttr,
    PartitionAttr,
)
from v8dialect.ir.keyword_syntax import KeywordAttribute
from v8dialect.ir.narrowing import array_items, int_data


def partition_attr(partition: Partition) -> PartitionAttr:
    params: dict[str, Attribute] = {
        k: IntegerAttr(v, 64) if isinstance(v, int) else StringAttr(v) for k, v in partition.params
    }
    return PartitionAttr(
        StringAttr(partition.kind), StringAttr(partition.reduction_order_effect), DictionaryAttr(params)
    )


def to_attr(contract: Contract, registry: ContractRegistry) -> AnyContractAttr:
    if contract.composite is not None:
        below, above = (to_attr(p, registry) for p in registry.parts(contract))
        if contract.family == "linear":
            assert isinstance(below, LinearContractAttr) and isinstance(above, LinearContractAttr)
            return LinearCompositeContractAttr(
                StringAttr(contract.id),
                StringAttr(contract.composite.selector),
                IntAttr(contract.composite.threshold),
                below,
                above,
            )
        assert isinstance(below, AttentionContractAttr) and isinstance(above, AttentionContractAttr)
        assert contract.composite.head_dim_multiple_of is not None
        return CompositeContractAttr(
            StringAttr(contract.id),
            StringAttr(contract.composite.selector),
            IntAttr(contract.composite.threshold),
            IntAttr(contract.composite.head_dim_multiple_of),
            below,
            above,
        )
    assert contract.partition is not None
    words = [StringAttr(v) for _, v in contract.fields]
    partition = partition_attr(contract.partition)
    if contract.family == "attention":
        return AttentionContractAttr.new([StringAttr(contract.id), *words, partition])
    if contract.family == "linear":
        return LinearContractAttr.new([StringAttr(contract.id), *words, partition])
    assert contract.op is not None
    points = ArrayAttr([StringAttr(p) for p in contract.rounding_points])
    return OpContractAttr.new([StringAttr(contract.id), StringAttr(contract.op), *words, points, partition])


def differences(attr: AnyContractAttr, contract: Contract, registry: ContractRegistry) -> list[str]:
    """Fields where the IR's contract differs from the registry's, as 'field: ir vs registry'."""
    expected = to_attr(contract, registry)
    if type(expected) is not type(attr):
        return [f"kind: #{attr.name} vs #{expected.name}"]
    return _field_differences(attr, expected, prefix="")


def _field_differences(ir: KeywordAttribute, reg: KeywordAttribute, prefix: str) -> list[str]:
    found: list[str] = []
    for key in ir.FIELDS:
        a, b = ir.field(key), reg.field(key)
        if a == b:
            continue
        if isinstance(a, KeywordAttribute) and isinstance(b, KeywordAttribute):
            found += _field_differences(a, b, prefix=f"{prefix}{key}.")
        else:
            found.append(f"{prefix}{key}: {_show(a)} vs {_show(b)}")
    return found


def _show(value: Attribute) -> str:
    if isinstance(value, StringAttr):
        return value.data
    if (number := int_data(value)) is not None:
        return str(number)
    if (items := array_items(value)) is not None:
        return "[" + ", ".join(_show(v) for v in items) + "]"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    """Print the IR attribute of registry contracts: python -m v8dialect.ir.contract_ir ID..."""
    import difflib
    import sys

    from v8dialect.data.contracts import load_registry

    ids = sys.argv[1:] if argv is None else argv
    registry = load_registry()
    # The registry's folder is where an unknown id was looked up: the error's location.
    where = Path(os.path.commonpath(registry.files)) if registry.files else Path("contracts")
    if not ids:
        print(f"{where}: error: name at least one contract id", file=sys.stderr)
        return 1
    for contract_id in ids:
        contract = registry.get(contract_id)
        if contract is None:
            near = difflib.get_close_matches(contract_id, list(registry.contracts), n=3)
            hint = f" (nearest: {', '.join(near)})" if near else ""
            print(f"{where}: error: unknown contract {contract_id!r}{hint}", file=sys.stderr)
            return 1
        print(to_attr(contract, registry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
