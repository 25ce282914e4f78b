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
from xdsl.ir import Operation
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


def c_string(text: str) -> str:
    """A C string literal of `text` (printable ASCII as is, everything else escaped)."""
    body = "".join(c if c.isascii() and c.isprintable() and c not in '"\\?' else
                   "".join(f"\\{b:03o}" for b in c.encode()) for c in text)
    return f'"{body}"'


PROFILE_FUNCTIONS = """
/* Wall time, the caller's view: a threadpool call counts until its last task ends. */
static uint64_t v8_profile_clock_ns(void) {
    struct timespec now;
    if (timespec_get(&now, TIME_UTC) != TIME_UTC) {
        return 0;
    }
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* Relaxed atomics: two threads may run one program's phases at once. */
static void v8_profile_add(v8_profile_site *site, uint64_t t0) {
    const uint64_t t1 = v8_profile_clock_ns();
    __atomic_fetch_add(&site->calls, 1u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&site->ns, t1 > t0 ? t1 - t0 : 0u, __ATOMIC_RELAXED);
}
"""


def profile_sites(functions: list[func.FuncOp]) -> dict[Operation, int]:
    """Every kernel call and inline op, numbered in print order."""
    ops = [op for fn in functions for op in fn.body.block.ops if isinstance(op, CallOp | InlineOp)]
    return {op: i for i, op in enumerate(ops)}


def calling_phases(functions: list[func.FuncOp]) -> dict[str, str]:
    """Function name -> the entry points that run it, directly or through layer functions."""
    callees = {fn.sym_name.data: [op.callee.string_value() for op in fn.body.block.ops
                                  if isinstance(op, InvokeOp)] for fn in functions}
    phases: dict[str, set[str]] = {name: set() for name in callees}
    for fn in functions:
        if not is_entry_point(fn):
            continue
        todo = [fn.sym_name.data]
        while todo:
            name = todo.pop()
            if fn.sym_name.data not in phases[name]:
                phases[name].add(fn.sym_name.data)
                todo += callees.get(name, [])
    return {name: "+".join(sorted(found)) for name, found in phases.items()}


def site_entry(op: CallOp | InlineOp, phases: dict[str, str]) -> str:
    fn = op.parent_op()
    assert isinstance(fn, func.FuncOp)
    callee = op.callee.data if isinstance(op, CallOp) else f"v8_inline_{op.kind.data}"
    words = (phases[fn.sym_name.data], fn.sym_name.data, op.node.data, op.resolved.word("kernel"),
             callee)
    return "{" + ", ".join(c_string(w) for w in words) + ", 0, 0}"


def print_profile_table(w: CWriter, sites: dict[Operation, int], phases: dict[str, str]) -> None:
    """A profiled build's site table and its accessor; without sites the accessor finds none."""
    if sites:
        w.line("/* ---- profile: each kernel call and inline op below adds its time to its site ---- */")
        w.line("#include <time.h>")
        w.out.write(PROFILE_FUNCTIONS)
        w.line()
        w.line(f"static v8_profile_site v8_profile_table[{len(sites)}] = {{")
        for op in sites:
            assert isinstance(op, CallOp | InlineOp)
            w.line(f"    {site_entry(op, phases)},")
        w.line("};")
        w.line()
    w.line("size_t v8_program_profile(v8_profile_site **sites) {")
    w.line("    if (sites != NULL) {")
    w.line(f"        *sites = {'v8_profile_table' if sites else 'NULL'};")
    w.line("    }")
    w.line(f"    return {len(sites)};")
    w.line("}")
    w.line()


def print_module(module: ModuleOp, out: IO[str], profile: bool = False) -> None:
    """profile: time every kernel call and inline op into a site table (v8_program_profile)."""
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
    functions.sort(key=is_entry_point)  # static layer functions before their callers
    sites = profile_sites(functions) if profile else None
    print_profile_table(w, sites or {}, calling_phases(functions))
    pool_users: set[str] = set()
    for fn in functions:
        printer = PhasePrinter(fn, w, pool_users, sites=sites)
        printer.print()
        if printer.uses_threadpool():
            pool_users.add(fn.sym_name.data)


# every program defines it; a build without profiling has no sites
PROFILE_DECLARATION = "size_t v8_program_profile(v8_profile_site **sites);"


def print_declarations(module: ModuleOp, out: IO[str]) -> None:
    """The C declarations of the entry points print_module defines, for a translation unit that
    calls them (the Python extension around a program compiled on its own), and each entry
    point's packed form, which that extension binds."""
    w = CWriter(out)
    w.line('#include "v8_runtime.h"')
    w.line(PROFILE_DECLARATION)
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
