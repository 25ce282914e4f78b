"""A decoder prefill's token count as a run-time argument.

The builder marks such a phase with ``v8.max_tokens`` (its buffers are sized for that many
tokens) and every argument with one entry per token with ``v8.token_axis``.  The entry point
then takes ``int64_t n_tokens`` (1 <= n_tokens <= the maximum), and every kernel is called
with the row counts of that many tokens: a row-major activation's first n_tokens rows are the
call's, and its contract's arithmetic per row does not depend on the rows after them.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

from v8dialect.ir.narrowing import array_items

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
