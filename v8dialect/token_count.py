"""A decoder prefill's token count as a run-time argument.

The builder marks such a phase with ``v8.max_tokens`` (its buffers are sized for that many
tokens) and every argument with one entry per token with ``v8.token_axis``.  The entry point
then takes ``int64_t n_tokens`` (1 <= n_tokens <= the maximum), and every kernel is called
with the row counts of that many tokens: a row-major activation's first n_tokens rows are the
call's, and its contract's arithmetic per row does not depend on the rows after them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute

from v8dialect.ir_types import array_items
from v8dialect.lowered import CExprAttr

MAX_TOKENS_ATTR = "v8.max_tokens"
TOKEN_AXIS_ATTR = "v8.token_axis"
RUNTIME_TOKENS = "n_tokens"  # the entry point's argument


def max_tokens(fn: func.FuncOp) -> int | None:
    """The phase's most tokens per call when the count is a run-time argument, else None."""
    attr = fn.attributes.get(MAX_TOKENS_ATTR)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def token_axes(fn: func.FuncOp) -> list[int | None]:
    """Per argument the builder declared, the axis with one entry per token (None: none)."""
    found: list[int | None] = []
    for attrs in array_items(fn.arg_attrs) or ():
        axis = attrs.data.get(TOKEN_AXIS_ATTR) if isinstance(attrs, DictionaryAttr) else None
        found.append(axis.value.data if isinstance(axis, IntegerAttr) else None)
    return found


@dataclass(frozen=True)
class TokenCount:
    """Row counts of a phase's activations: constants, or n_tokens times a constant when the
    phase's token count is a run-time argument (`maximum`, the built count)."""

    maximum: int | None = None

    @property
    def runtime(self) -> bool:
        return self.maximum is not None

    def rows(self, tokens: int, per_token: int = 1) -> Attribute:
        """`tokens` leading rows of `per_token` each: an activation's leading dim is the
        phase's token count, so with a run-time count it becomes n_tokens."""
        if self.maximum is None or tokens != self.maximum:
            return IntegerAttr(tokens * per_token, i64)
        scaled = RUNTIME_TOKENS if per_token == 1 else f"{RUNTIME_TOKENS} * {per_token}"
        return CExprAttr(StringAttr(scaled))

    def text(self, tokens: int) -> str:
        """The count as C text (e.g. in `n_past + n_tokens`)."""
        return RUNTIME_TOKENS if self.maximum is not None and tokens == self.maximum else str(tokens)
