"""The C printer: call-ready IR -> one C translation unit (`-t c`).

Per phase (function) it prints an entry point

    v8_status <phase>(v8_threadpool *pool, int64_t n_past, void *arena,
                      void *scratch, size_t scratch_bytes, <inputs...>, <outputs...>);

(a decoder's prefill also takes ``int64_t n_tokens`` after ``n_past``: its token count at run
time, at most the built one; see v8dialect/ir/token_count.py)

plus ``<phase>_arena_bytes()`` and ``<phase>_scratch_bytes(pool)``.  Each
``v8.call`` becomes one call of the bound production or threadpool function
with the resolved contract's selector constant; each ``v8.inline`` calls the
printer's own intrinsic code, dispatched as its kernel map declares.  Before
printing anything the printer checks every op against the resolution ledger
and every call against its pinned resolution; any difference is an error and
no C is printed.  Output is deterministic.

A layer function (v8dialect/builder/layers.py) prints as a static C function with the same
leading parameters, before the phases that call it; ``v8.invoke`` passes it the caller's
parameters and its slice of the caller's arena.

The printer of one function (passes/c_function.py) is a printer over ops: ``print_op``
dispatches on the op's class (one method per call-ready op, functools.singledispatchmethod),
and ``expr`` prints a value as the C expression of its defining op (an entry-point parameter,
the pool's worker count, an ``arith`` length).  It never reads C text out of the IR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from v8passes.c_function import STAGE, CWriter, PhasePrinter
from v8passes.c_inline import NEEDS_OPS_HEADER, inline_functions
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ModuleOp,
)
from xdsl.utils.target import Target

from v8dialect.diagnostics import V8Error, located, op_error
from v8dialect.ir.call_ready import (
    EntryValueOp,
    KernelDeclOp,
    RequireOp,
    ScratchNeedOp,
    SelectorAttr,
    WorkersOp,
    signature_problems,
)
from v8dialect.ir.lowered import (
    ArenaSliceOp,
    CallOp,
    InlineOp,
    InvokeOp,
    LastRowOp,
    ViewOp,
)
from v8dialect.ir.pinning import check_pinned
from v8dialect.ir.structure import entry_points, is_entry_point

# ---- checks before printing ----------------------------------------------------------


def call_problems(op: CallOp) -> list[str]:
    """A call must use the function and selector its pinned resolution names."""
    resolved = op.resolved
    expected = resolved.callee
    problems: list[str] = []
    if op.callee.data != expected:
        problems.append(f"calls '{op.callee.data}' but the resolution binds '{expected}'")
    constants = [a.constant.data for a in op.args.data if isinstance(a, SelectorAttr)]
    if constants != [resolved.word("selector")]:
        problems.append(f"passes selector {constants} but the resolved contract's selector is "
                        f"'{resolved.word('selector')}'")
    return problems


CALL_READY = (ArenaSliceOp, ViewOp, LastRowOp, InlineOp, InvokeOp, KernelDeclOp, EntryValueOp, WorkersOp,
              RequireOp, ScratchNeedOp)


def check_call_ready(module: ModuleOp) -> None:
    check_pinned(module, STAGE)
    errors: list[str] = []
    declared = {op.sym_name.data: op for op in module.walk() if isinstance(op, KernelDeclOp)}
    for op in module.walk():
        if isinstance(op, CallOp):
            problems = call_problems(op)
            decl = declared.get(op.callee.data)
            if not problems and decl is None:
                problems.append(f"'{op.callee.data}' has no v8.kernel_decl")
            elif not problems and decl is not None:
                problems = signature_problems(op.args.data, op.values, decl)
            errors += [op_error(op, f"{STAGE}: {p}") for p in problems]
        elif op.dialect_name() == "v8" and not isinstance(op, CALL_READY):
            errors.append(op_error(op, f"{STAGE}: '{op.name}' is not call-ready; run "
                                   "lower-to-kernels and prepare-calls first"))
    if errors:
        raise V8Error(errors)


# ---- printing ------------------------------------------------------------------------


def inline_kinds(module: ModuleOp) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each inline op kind with the ISA dispatch its kernel map declared (one per kind)."""
    kinds: dict[str, tuple[str, tuple[str, ...]]] = {}
    for op in module.walk():
        if isinstance(op, InlineOp):
            ex = op.resolved.execution
            declared = (ex.word("isa_dispatch"), tuple(v.data for v in ex.isa_variants.data))
            previous = kinds.setdefault(op.kind.data, declared)
            if previous != declared:
                raise V8Error([op_error(op, f"{STAGE}: inline '{op.kind.data}' is declared with two "
                                        f"ISA dispatches ({previous} and {declared})")])
    return dict(sorted(kinds.items()))


def headers(module: ModuleOp) -> list[str]:
    """The headers that declare the kernels the calls bind (relative to their maps' root)."""
    return sorted({op.header.data for op in module.walk() if isinstance(op, KernelDeclOp)})


PRELUDE = """\
/* Generated by v8 (the C printer of call-ready IR).  Every kernel call below was
 * resolved from a declared numerical contract; see the comment above each call. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "v8_runtime.h"
"""

FP_DISCIPLINE = """
/* The contracts pin every rounding: no contraction of a*b+c into an FMA. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static inline size_t v8_max_size(size_t a, size_t b) { return a > b ? a : b; }
"""


def print_module(module: ModuleOp, out: IO[str]) -> None:
    check_call_ready(module)
    kinds = inline_kinds(module)
    includes = headers(module)
    if NEEDS_OPS_HEADER & set(kinds) and "ops/v8_ops.h" not in includes:
        includes.append("ops/v8_ops.h")
    w = CWriter(out)
    out.write(PRELUDE)
    # kernel headers live beside include/ under runtime_c, so -I runtime_c/include finds them
    for header in includes:
        w.line(f'#include "../{header}"')
    out.write(FP_DISCIPLINE)
    w.line()
    for kind, (dispatch, variants) in kinds.items():
        w.line(f"/* ---- inline {kind}: {dispatch} dispatch over {', '.join(variants)} ---- */")
        out.write(inline_functions(kind, dispatch, variants))
        w.line()
    functions = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if not any(is_entry_point(fn) for fn in functions):
        raise V8Error([located("<module>", f"{STAGE}: no phase functions to print")])
    pool_users: set[str] = set()
    for fn in sorted(functions, key=is_entry_point):  # static layer functions before their callers
        printer = PhasePrinter(fn, w, pool_users)
        printer.print()
        if printer.uses_threadpool():
            pool_users.add(fn.sym_name.data)


def print_declarations(module: ModuleOp, out: IO[str]) -> None:
    """The C declarations of the entry points print_module defines, for a translation unit that
    calls them (the Python extension around a program compiled on its own), and each entry
    point's packed form, which that extension binds."""
    w = CWriter(out)
    w.line('#include "v8_runtime.h"')
    for fn in entry_points(module):
        printer = PhasePrinter(fn, w)
        printer.print_declarations()
        printer.print_packed_entry()


@dataclass(frozen=True)
class CTarget(Target):
    """`-t c`: print call-ready IR as one C translation unit."""

    name = "c"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        print_module(module, output)
