"""The v8 dialect: every op and attribute it registers (contract attributes, GraphIR and
LoweredIR ops)."""

from xdsl.ir import Attribute, Dialect

from v8dialect.ir import contract_attrs, resolution_attrs, types
from v8dialect.ir.lowered import LOWERED_ATTRIBUTES, LOWERED_OPS
from v8dialect.ops.registry import GRAPH_OPS

ATTRIBUTES: list[type[Attribute]] = [
    types.PhaseAttr,
    types.MaskAttr,
    types.Q4KType,
    types.Q6KType,
    types.Q5KType,
    types.Q80Type,
    types.Q50Type,
    types.Q40Type,
    types.Q41Type,
    types.Q51Type,
    contract_attrs.PartitionAttr,
    contract_attrs.AttentionContractAttr,
    contract_attrs.LinearContractAttr,
    contract_attrs.OpContractAttr,
    contract_attrs.CompositeContractAttr,
    contract_attrs.LinearCompositeContractAttr,
    resolution_attrs.ExecutionRequirementAttr,
    resolution_attrs.ExecutionAttr,
    resolution_attrs.RequirementAttr,
    resolution_attrs.ResolvedAttr,
]

V8 = Dialect("v8", GRAPH_OPS + LOWERED_OPS, ATTRIBUTES + LOWERED_ATTRIBUTES)
