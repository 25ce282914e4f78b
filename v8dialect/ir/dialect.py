"""The v8 dialect: contract attributes and GraphIR ops."""

from xdsl.ir import Dialect

from v8dialect.ir.attributes import ATTRIBUTES
from v8dialect.ir.lowered import LOWERED_ATTRIBUTES, LOWERED_OPS
from v8dialect.ops.registry import GRAPH_OPS

V8 = Dialect("v8", GRAPH_OPS + LOWERED_OPS, ATTRIBUTES + LOWERED_ATTRIBUTES)
