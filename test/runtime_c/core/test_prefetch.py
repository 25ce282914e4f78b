"""core/prefetch.h's hints must survive every way the kernels reach them.

A kernel body is often an always_inline function under a per-variant target pragma
(core/simd.h) that calls a small generic inline helper which prefetches.  When the
helper prefetched through _mm_prefetch, GCC 12 neither inlined the helper into such a
body nor kept the call: it found the helper free of side effects and deleted it, so the
x16 Q4_K GEMV's walks ran with no prefetch at all.  The helper chain below is that
shape; the compiler the runtime builds with must emit every prefetch of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from v8dialect.data.paths import runtime_c_dir
from v8dialect.runtime.cbuild import BASE_CFLAGS, compiler_command

KERNEL_SHAPE = r"""
#include "core/prefetch.h"
#include <immintrin.h>

static inline void helper_line(const float *p) { v8_prefetch_line((uintptr_t)p + 4096); }
static inline void helper_block(const float *p) { v8_prefetch_lines((uintptr_t)p + 8192, 128); }

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")
static inline __attribute__((always_inline)) float walk(const float *x, long n, const int lines) {
    __m512 acc = _mm512_setzero_ps();
    for (long i = 0; i < n; i += 16) {
        helper_block(x + i);
        if (lines) {
            helper_line(x + i);
        }
        acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
    }
    return _mm512_reduce_add_ps(acc);
}
float walk_plain(const float *x, long n) { return walk(x, n, 0); }
float walk_lines(const float *x, long n) { return walk(x, n, 1); }
#pragma GCC pop_options
"""


def assembly(tmp_path: Path) -> str:
    src = tmp_path / "kernel_shape.c"
    src.write_text(KERNEL_SHAPE)
    out = tmp_path / "kernel_shape.s"
    cc = compiler_command()[:1]
    flags = [f for f in BASE_CFLAGS if f != "-Werror"]
    subprocess.run([*cc, *flags, f"-I{runtime_c_dir()}", "-S", str(src), "-o", str(out)],
                   check=True, capture_output=True, text=True)
    return out.read_text()


def function_body(asm: str, name: str) -> str:
    start = asm.index(f"\n{name}:")
    return asm[start:asm.index(".cfi_endproc", start)]


def test_prefetches_survive_always_inline_target_bodies(tmp_path: Path) -> None:
    asm = assembly(tmp_path)
    plain, lines = function_body(asm, "walk_plain"), function_body(asm, "walk_lines")
    # the block helper's two lines per step in both, the line helper's one more in walk_lines
    assert plain.count("prefetch") >= 2, plain
    assert lines.count("prefetch") >= 3, lines
