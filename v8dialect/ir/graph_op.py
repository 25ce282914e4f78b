"""The common ground of GraphIR operations.

One op per graph operation.  Each carries a graph ``node`` name (unique per
function; the resolution ledger keys on it), its ``phase``, the contract it
requires as a typed attribute, an optional execution requirement and circuit
provenance, and — after resolve-contracts — the ``resolved`` provider.

Every op answers the questions the resolver asks: which kernel op it is,
which dtypes and layouts its operands have, and which constraints of a
kernel map its shapes violate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IntAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, BlockArgument, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    opt_prop_def,
    prop_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.ir.contract_attrs import (
    ContractAttr,
    OpContractAttr,
)
from v8dialect.ir.narrowing import tensor_type
from v8dialect.ir.resolution_attrs import (
    ExecutionRequirementAttr,
    RequirementAttr,
    ResolvedAttr,
)
from v8dialect.ir.types import (
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

QK_BLOCK = 256  # weights per K-quant super-block
I32_MAX = 2**31 - 1  # positions are int32 in llama.cpp and in the C ABI
# weights per block of each quantized weight type (K must be a multiple)
BLOCK_ELEMENTS = {"q4_k": QK_BLOCK, "q5_k": QK_BLOCK, "q6_k": QK_BLOCK,
                  "q8_0": 32, "q5_0": 32, "q4_0": 32, "q4_1": 32, "q5_1": 32}
# the quantized element types; each prints as !v8.<dtype name>
QUANT_ELEMENT_TYPES = (Q4KType, Q5KType, Q6KType, Q80Type, Q50Type, Q40Type, Q41Type, Q51Type)

OP_TAIL_FORMAT = (
    "(`execution` qualified($execution)^)? (`requirement` qualified($requirement)^)? "
    "(`resolved` qualified($resolved)^)? attr-dict `:` functional-type(operands, results)"
)


# The function-argument attribute naming the layout a weight argument holds when it is not the
# file's own rows: one of vocab.PREPARED_LAYOUTS, made at load time (runtime_c/README.md,
# weight_prepare).
LAYOUT_ATTR = "v8.layout"


def declared_layout(value: SSAValue) -> str | None:
    """The layout a function argument declares with `v8.layout` (None: the file's own)."""
    if not isinstance(value, BlockArgument):
        return None
    parent = value.block.parent_op()
    if not isinstance(parent, FuncOp) or parent.arg_attrs is None:
        return None
    entries = parent.arg_attrs.data
    if value.index >= len(entries):
        return None
    found = entries[value.index].data.get(LAYOUT_ATTR)
    return found.data if isinstance(found, StringAttr) else None


def dtype_name(element: Attribute) -> str:
    if isinstance(element, QUANT_ELEMENT_TYPES):
        return element.name.removeprefix("v8.")
    match element:
        case Float32Type():
            return "f32"
        case Float16Type():
            return "f16"
        case BFloat16Type():
            return "bf16"
        case IntegerType(width=IntAttr(data=32)):
            return "i32"
        case _:
            return str(element)


def tensor(value_type: Attribute, what: str, rank: int) -> TensorType[Attribute]:
    found = tensor_type(value_type)
    if found is None or len(found.get_shape()) != rank:
        raise VerifyException(f"{what} must be a rank-{rank} tensor, got {value_type}")
    return found


def shape(value_type: Attribute) -> tuple[int, ...]:
    found = tensor_type(value_type)
    assert found is not None
    return tuple(found.get_shape())


def element(value_type: Attribute) -> str:
    found = tensor_type(value_type)
    assert found is not None
    return dtype_name(found.get_element_type())


class GraphOp(IRDLOperation):
    """Common ground of contract-bearing GraphIR ops."""

    KERNEL_OP: ClassVar[str]
    IN_PLACE: ClassVar[str | None] = None  # operand whose buffer the result reuses

    node = prop_def(StringAttr)
    phase = prop_def(PhaseAttr)
    execution = opt_prop_def(ExecutionRequirementAttr)
    requirement = opt_prop_def(RequirementAttr)
    resolved = opt_prop_def(ResolvedAttr)

    @property
    def required_contract(self) -> ContractAttr:
        contract = self.properties["contract"]
        assert isinstance(contract, ContractAttr)
        return contract

    @property
    def phase_name(self) -> str:
        return self.phase.data.value

    def dtypes(self) -> Mapping[str, str]:
        raise NotImplementedError

    def layout(self) -> Mapping[str, str]:
        raise NotImplementedError

    def constraint_problems(self, constraints: Mapping[str, int]) -> list[str]:
        """Shape facts of this op that a kernel map's constraints exclude."""
        del constraints
        return []

    def query_batch(self) -> int:
        """Queries processed per call: what a composite contract's selector reads."""
        return 1

    def verify_contract_op(self) -> None:
        contract = self.required_contract
        if isinstance(contract, OpContractAttr) and contract.word("op") != self.name.removeprefix("v8."):
            raise VerifyException(
                f"contract '{contract.id}' is for op '{contract.word('op')}', not '{self.name}'"
            )
