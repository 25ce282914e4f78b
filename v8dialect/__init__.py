"""v8: numerical-contract compiler dialect for LLM inference kernels.

``v8dialect.build(module)`` compiles a module (GraphIR text or an xDSL module,
at any stage) to native code and returns a Program whose phases run on numpy
arrays; see ``v8dialect.runtime.program``.  Imported lazily so that loading the
dialect (e.g. as an xDSL plugin) does not pull in cffi or numpy.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "build":
        from v8dialect.runtime.program import build

        return build
    raise AttributeError(f"module 'v8dialect' has no attribute '{name}'")
