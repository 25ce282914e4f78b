"""Execution, requirement and resolution attributes: what an op asks of threading, where its
contract requirement comes from, and the provider resolve-contracts pinned for it.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.irdl import irdl_attr_definition

from v8dialect.data import vocab
from v8dialect.ir.keyword_syntax import KeywordAttribute, Nested, Text, Word, Words


@irdl_attr_definition
class ExecutionRequirementAttr(KeywordAttribute):
    """What an op asks of threading: #v8.exec_requirement<runtime = threadpool, partition = ...>."""

    name = "v8.exec_requirement"
    FIELDS = {
        "runtime": Word(vocab.THREADING_RUNTIMES),
        "partition": Word(vocab.WORK_PARTITIONS),
    }

    runtime: StringAttr
    partition: StringAttr


@irdl_attr_definition
class ExecutionAttr(KeywordAttribute):
    """The resolved execution: ISA dispatch, threading runtime, partition, order effect."""

    name = "v8.execution"
    FIELDS = {
        "isa_dispatch": Word(vocab.ISA_DISPATCH_KINDS),
        "isa_variants": Words(vocab.ISA_VARIANTS),
        "runtime": Word(vocab.THREADING_RUNTIMES),
        "partition": Word(vocab.WORK_PARTITIONS),
        "reduction_order_effect": Word(vocab.REDUCTION_ORDER_EFFECTS),
    }

    isa_dispatch: StringAttr
    isa_variants: ArrayAttr[StringAttr]
    runtime: StringAttr
    partition: StringAttr
    reduction_order_effect: StringAttr


@irdl_attr_definition
class RequirementAttr(KeywordAttribute):
    """Where an op's contract requirement comes from (a circuit) and its status."""

    name = "v8.requirement"
    LEAD = "source"
    FIELDS = {"status": Word(vocab.STATUSES)}

    source: StringAttr
    status: StringAttr


NO_FUNCTION = ""


@irdl_attr_definition
class ResolvedAttr(KeywordAttribute):
    """The one provider resolve-contracts chose, pinned for every later stage.

    Function fields are "" when the map binds none (inline emission, or no
    threadpool).  ``blockers`` lists why the op could not run in production mode
    (statuses that are not validated); it is empty in production mode.
    """

    name = "v8.resolved"
    FIELDS = {
        "kernel": Text(),
        "contract": Text(),
        "selector": Text(),
        "emission": Word(vocab.EMISSIONS),
        "oracle": Text(),
        "production": Text(),
        "threadpool": Text(),
        "execution": Nested((ExecutionAttr,)),
        "blockers": Words(tuple(vocab.BLOCKERS)),
    }

    kernel: StringAttr
    contract: StringAttr
    selector: StringAttr
    emission: StringAttr
    oracle: StringAttr
    production: StringAttr
    threadpool: StringAttr
    execution: ExecutionAttr
    blockers: ArrayAttr[StringAttr]

    @property
    def calls_threadpool(self) -> bool:
        """Whether the call goes through the threadpool dispatch (vs the production function).

        A threadpool provider run under its 'serial' partition is called serially.
        """
        return (self.execution.word("runtime") == "threadpool"
                and self.execution.word("partition") != "serial")

    @property
    def callee(self) -> str:
        return self.word("threadpool" if self.calls_threadpool else "production")

    def summary(self) -> dict[str, str]:
        """The pinned identity later stages compare: kernel, functions, contract, execution."""
        fields = ("kernel", "contract", "selector", "emission", "oracle", "production", "threadpool")
        pinned = {key: self.word(key) for key in fields}
        pinned["execution"] = str(self.execution)
        return pinned
