"""Every op kind, by name, and the GraphIR ops they define."""

from __future__ import annotations

from collections.abc import Mapping

from xdsl.ir import Operation

from v8dialect.data import vocab
from v8dialect.ops import (
    attention,
    elementwise,
    embedding,
    head_split,
    kv_store,
    last_token,
    norm,
    patch_merge,
    projection,
    recurrent,
    reshape,
    rope,
)
from v8dialect.ops.kind import OpKind

_MODULES = (reshape, last_token, attention, projection, norm, rope, elementwise, embedding, kv_store,
            head_split, recurrent, patch_merge)

OP_KINDS: Mapping[str, OpKind] = {kind.name: kind for module in _MODULES for kind in module.KINDS}
GRAPH_OPS: list[type[Operation]] = list(dict.fromkeys(
    op for kind in OP_KINDS.values() for op in kind.graph_ops))

# The vocabulary (what registries and kernel maps may say) and the op kinds (what the compiler
# can build and bind) name the same kinds.
assert {k for k, kind in OP_KINDS.items() if kind.contract} == set(vocab.KERNEL_OPS), (
    sorted(set(vocab.KERNEL_OPS) ^ {k for k, kind in OP_KINDS.items() if kind.contract}))


def op_kind(name: str) -> OpKind | None:
    return OP_KINDS.get(name)
