"""Building a phase's call-ready values: the entry point's parameters and the run-time
lengths derived from them, each created once per function at the top of its body.

``Tokens`` gives a kernel's row counts: constants, or ``n_tokens`` (times a constant) when a
decoder prefill's token count is a run-time argument and the activation has the built count
(see v8dialect/ir/token_count.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from xdsl.dialects import arith
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from v8dialect.ir.call_ready import EntryValue, EntryValueOp, RequireOp, ScratchNeedOp, WorkersOp

SLE = 3  # arith.cmpi's predicate number of `sle`
Arg = Attribute | SSAValue  # a call argument: a typed constant or an SSA value


@dataclass
class FunctionValues:
    """The values of one phase function, created on first use and shared by its calls."""

    block: Block
    _last: Operation | None = None
    _made: dict[Hashable, SSAValue] = field(default_factory=dict[Hashable, SSAValue])
    _needs: set[Hashable] = field(default_factory=set[Hashable])
    _required: set[SSAValue] = field(default_factory=set[SSAValue])

    def _insert(self, op: Operation) -> None:
        """New ops go to the top of the body, in the order they are made."""
        if self._last is None:
            first = self.block.first_op
            assert first is not None  # a phase ends with func.return
            self.block.insert_op_before(op, first)
        else:
            self.block.insert_op_after(op, self._last)
        self._last = op

    def _once(self, key: Hashable, make: Callable[[], Operation]) -> SSAValue:
        if key not in self._made:
            op = make()
            self._insert(op)
            self._made[key] = op.results[0]
        return self._made[key]

    def entry(self, which: EntryValue) -> SSAValue:
        return self._once(("entry", which), lambda: EntryValueOp(which))

    def workers(self) -> SSAValue:
        return self._once("workers", lambda: WorkersOp(self.entry(EntryValue.POOL)))

    def constant(self, value: int) -> SSAValue:
        return self._once(("constant", value), lambda: arith.ConstantOp(IntegerAttr(value, i64)))

    def add(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._once(("add", lhs, rhs), lambda: arith.AddiOp(lhs, rhs))

    def mul(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._once(("mul", lhs, rhs), lambda: arith.MuliOp(lhs, rhs))

    def at_most(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._once(("sle", lhs, rhs), lambda: arith.CmpiOp(lhs, rhs, "sle"))

    def rebuilt(self, value: SSAValue) -> SSAValue:
        """This function's copy of a value another function computed from its entry values
        (a layer function's requirement, checked by the phase that calls it)."""
        op = value.owner
        match op:
            case EntryValueOp():
                return self.entry(op.entry)
            case WorkersOp():
                return self.workers()
            case arith.ConstantOp(value=IntegerAttr() as constant):
                return self.constant(constant.value.data)
            case arith.AddiOp():
                return self.add(self.rebuilt(op.lhs), self.rebuilt(op.rhs))
            case arith.MuliOp():
                return self.mul(self.rebuilt(op.lhs), self.rebuilt(op.rhs))
            case arith.CmpiOp() if op.predicate.value.data == SLE:
                return self.at_most(self.rebuilt(op.lhs), self.rebuilt(op.rhs))
            case _:
                raise ValueError(f"cannot rebuild {value} in another function")

    def drop_unused(self) -> None:
        """Erase the values no call, requirement or scratch need ended up using (the binder
        makes every value an ABI might name), last made first so their operands lose the use."""
        for value in reversed(list(self._made.values())):
            if not value.uses:
                op = value.owner
                assert isinstance(op, Operation)
                op.detach()
                op.erase()

    def require(self, condition: SSAValue) -> None:
        """The entry point checks `condition` before any kernel runs (once per function)."""
        if condition not in self._required:
            self._required.add(condition)
            self._insert(RequireOp(condition))

    def scratch_need(self, function: str, args: list[Arg]) -> None:
        """A kernel needs `function(args)` bytes of scratch (each distinct need once)."""
        key = (function, *args)
        if key in self._needs:
            return
        self._needs.add(key)
        operands: list[SSAValue] = []
        attrs: list[Attribute] = []
        for arg in args:
            if isinstance(arg, SSAValue):
                operands.append(arg)
                attrs.append(IntegerAttr.from_index_int_value(len(operands) - 1))
            else:
                attrs.append(arg)
        self._insert(ScratchNeedOp.create(operands=operands, properties={
            "function": StringAttr(function), "args": ArrayAttr(attrs)}))


@dataclass(frozen=True)
class Tokens:
    """Row counts of a phase's activations; `maximum` is the built token count when the phase
    takes its count at run time (None: every count is a constant)."""

    values: FunctionValues
    maximum: int | None = None

    @property
    def runtime(self) -> bool:
        return self.maximum is not None

    def constant_counts(self) -> Tokens:
        """The same phase sized for its most tokens (how scratch is sized, once per call)."""
        return Tokens(self.values)

    def count(self, tokens: int) -> SSAValue:
        """`tokens` as a value: n_tokens when it is the phase's run-time count."""
        if self.maximum is not None and tokens == self.maximum:
            return self.values.entry(EntryValue.N_TOKENS)
        return self.values.constant(tokens)

    def rows(self, tokens: int, per_token: int = 1) -> Arg:
        """`tokens` leading rows of `per_token` each (an activation's leading dim is the
        phase's token count, so with a run-time count it is n_tokens times per_token)."""
        if self.maximum is None or tokens != self.maximum:
            return IntegerAttr(tokens * per_token, i64)
        n_tokens = self.values.entry(EntryValue.N_TOKENS)
        return n_tokens if per_token == 1 else self.values.mul(n_tokens, self.values.constant(per_token))

    def after_past(self, tokens: int) -> SSAValue:
        """n_past + tokens: the KV length once this call's tokens are stored."""
        return self.values.add(self.values.entry(EntryValue.N_PAST), self.count(tokens))
