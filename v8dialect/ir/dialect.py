"""The v8 dialect: every op and attribute it registers (contract attributes, GraphIR and
LoweredIR ops)."""

from xdsl.ir import Attribute, Dialect

from v8dialect.ir.contract_attrs import (
    AttentionContractAttr,
    CompositeContractAttr,
    LinearCompositeContractAttr,
    LinearContractAttr,
    OpContractAttr,
    PartitionAttr,
)
from v8dialect.ir.lowered import LOWERED_ATTRIBUTES, LOWERED_OPS
from v8dialect.ir.resolution_attrs import (
    ExecutionAttr,
    ExecutionRequirementAttr,
    RequirementAttr,
    ResolvedAttr,
)
from v8dialect.ir.types import (
    MaskAttr,
    PhaseAttr,
    Q4KType,
    Q5KType,
    Q6KType,
    Q40Type,
    Q41Type,
    Q50Type,
    Q51Type,
    Q80Type,
)
from v8dialect.ops.registry import GRAPH_OPS

ATTRIBUTES: list[type[Attribute]] = [
    PhaseAttr,
    MaskAttr,
    Q4KType,
    Q6KType,
    Q5KType,
    Q80Type,
    Q50Type,
    Q40Type,
    Q41Type,
    Q51Type,
    PartitionAttr,
    AttentionContractAttr,
    LinearContractAttr,
    OpContractAttr,
    CompositeContractAttr,
    LinearCompositeContractAttr,
    ExecutionRequirementAttr,
    ExecutionAttr,
    RequirementAttr,
    ResolvedAttr,
]

V8 = Dialect("v8", GRAPH_OPS + LOWERED_OPS, ATTRIBUTES + LOWERED_ATTRIBUTES)
