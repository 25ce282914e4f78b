"""xDSL plugin entry point: plain ``xdsl-opt`` sees the v8 dialect and passes.

Imported at every xdsl-opt start, so everything here is a lazy factory.
"""

from v8passes import get_all_passes
from xdsl.ir import Dialect
from xdsl.universe import Universe
from xdsl.utils.target import Target


def _v8_dialect() -> Dialect:
    from v8dialect.ir.dialect import V8

    return V8


def _c_target() -> type[Target]:
    from v8passes.emit_c import CTarget

    return CTarget


V8_UNIVERSE = Universe(
    all_dialects={"v8": _v8_dialect}, all_passes=get_all_passes(), all_targets={"c": _c_target}
)
