"""Facts about the running CPU that a build may default to.

llama.cpp's CPU backend is compiled for one x86 feature set (`GGML_NATIVE` picks the build
machine's), and several of its kernels compute different bits per feature set: its fp32,
fp16 and bf16 mul_mat accumulate in as many lanes as one vector register holds, its vector
exp and dot products fold a register's lanes in that register's tree. A circuit asking for
llama.cpp's arithmetic therefore names the build it reproduces (the `ggml_build` manifest
value); `native` means the build llama.cpp gets on this machine.

Some of its arithmetic is not even a property of the feature set but of how the compiler's
tuning for the build machine vectorized ggml's plain C loops: SSM_CONV's 4-tap sum and
ggml_vec_dot_f32's leftover loop (`sum += x * y`: fused into an FMA chain where left scalar,
rounded products where vectorized). Some tunings use no vector below 8 fp32 lanes, others
also 4-lane vectors. The `ggml_loop_vectors` manifest value names which; `native` is what
this machine's compiler makes of the same loop nests (`native_loop_vectors`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

GGML_BUILDS = ("avx512", "avx2")
NATIVE = "native"


class HostError(Exception):
    """The running CPU has no ggml build v8 reproduces; the message says what to pass."""


def cpu_flags() -> frozenset[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_ggml_build(flags: frozenset[str] | None = None) -> str:
    """The ggml build class a native llama.cpp compile gets on this CPU."""
    have = cpu_flags() if flags is None else flags
    if "avx512f" in have:
        return "avx512"
    if {"avx2", "fma", "f16c"} <= have:
        return "avx2"
    raise HostError(
        "ggml_build = native: this CPU has neither AVX-512 nor AVX2 with FMA and F16C, "
        f"so no llama.cpp build v8 reproduces is native here; set ggml_build to one of "
        f"{', '.join(GGML_BUILDS)}"
    )


def restrict_to_build(lib: Any, build: str) -> None:
    """Restrict a v8 extension's kernels to what a ggml build of class `build` runs on.

    Some contracts name the running CPU's lane tree (the single-range attention dot
    accumulates in as many fp32 lanes as the widest register the kernel dispatches to, as
    ggml's does for the build it was compiled as), so reproducing an AVX2 llama.cpp on an
    AVX-512 machine means running v8's AVX2 variant there.  An AVX-512 build needs nothing:
    the running CPU already is one, or the build could not run on it, so it lifts any
    restriction (the mask is the extension's, shared by every session of its program).
    The AVX2 mask keeps V8_CPU_LIBM_EXPF_LANES where this host has it: that trait belongs to
    the C library on any AVX2 + FMA CPU (an AVX2-only host sets it too) and moves no bit."""
    if build not in GGML_BUILDS:
        raise HostError(f"ggml_build {build!r}: one of {', '.join(GGML_BUILDS)}")
    if build == "avx2":
        lib.v8_cpu_restrict(lib.V8_CPU_AVX2 | lib.V8_CPU_FMA | lib.V8_CPU_F16C
                            | lib.V8_CPU_LIBM_EXPF_LANES)
    else:
        lib.v8_cpu_restrict(0xFFFFFFFF)


def ggml_build_of_system_info(system_info: str) -> str:
    """The build class of a libggml from its system-info line (`AVX512 = 1 | ...`)."""
    fields = dict(
        (part.split("=")[0].strip(), part.split("=")[1].strip())
        for part in system_info.split("|")
        if part.count("=") == 1
    )
    if fields.get("AVX512") == "1":
        return "avx512"
    if fields.get("AVX2") == "1":
        return "avx2"
    raise HostError(f"llama.cpp's CPU backend reports neither AVX512 nor AVX2: {system_info!r}")


LOOP_VECTORS = ("min_8_lanes", "min_4_lanes")

# Two loop nests as llama.cpp's CPU backend has them, kept out of line so the compiler sees
# the trip counts only at run time, as it does in ggml: SSM_CONV (tokens, rows, then the
# d_conv taps, `sumf += s * c`) and ggml_vec_dot_f32's leftover loop after its vector body.
# main compares their outputs with each form written out explicitly (explicit fmaf for the
# fused form, volatile products for the rounded one) and prints the form both loops agree on.
_LOOP_PROBE = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void conv(const float *src, const float *w, float *dst,
                                           int nc, int ncs, int nr, int n_t) {
    for (int i2 = 0; i2 < n_t; ++i2) {
        const float *s = src + i2;
        float *x = dst + i2 * nr;
        for (int i1 = 0; i1 < nr; ++i1) {
            float sumf = 0.0f;
            for (int i0 = 0; i0 < nc; ++i0) {
                sumf += s[i0 + i1 * ncs] * w[i0 + i1 * nc];
            }
            x[i1] = sumf;
        }
    }
}

__attribute__((noinline)) static float leftovers(const float *x, const float *y, int np, int n,
                                                 float sumf) {
    for (int i = np; i < n; ++i) {
        sumf += x[i] * y[i];
    }
    return sumf;
}

/* The sum of n products from s, rounded up to the last n % block, fused after. */
static float model(const float *x, const float *y, int n, int block, float s) {
    const int rounded = n - n % block;
    for (int i = 0; i < n; ++i) {
        if (i < rounded) {
            volatile float p = x[i] * y[i];
            s = s + p;
        } else {
            s = fmaf(x[i], y[i], s);
        }
    }
    return s;
}

static float next(unsigned *state, int scale) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((int)(*state >> 8) - (1 << 23)) / (float)(1 << scale);
}

int main(int argc, char **argv) {
    const int nc = argc > 1 ? atoi(argv[1]) : 4, n_t = 3, nr = 96, ncs = nc - 1 + n_t;
    static float src[96 * 8], w[96 * 8], out[3 * 96], x[64], y[64];
    unsigned state = 12345u;
    for (int i = 0; i < nr * ncs; ++i) src[i] = next(&state, 21);
    for (int i = 0; i < nr * nc; ++i) w[i] = next(&state, 23);
    for (int i = 0; i < 64; ++i) {
        x[i] = next(&state, 20);
        y[i] = next(&state, 22);
    }
    conv(src, w, out, nc, ncs, nr, n_t);
    int tap_fused = 1, tap_rounded = 1;
    for (int i2 = 0; i2 < n_t; ++i2) {
        for (int i1 = 0; i1 < nr; ++i1) {
            const float *s = src + i2 + i1 * ncs, *c = w + i1 * nc;
            float f = s[0] * c[0];
            for (int i0 = 1; i0 < nc; ++i0) f = fmaf(s[i0], c[i0], f);
            tap_fused &= out[i2 * nr + i1] == f;
            tap_rounded &= out[i2 * nr + i1] == model(s, c, nc, 4, 0.0f);
        }
    }
    int tail8 = 1, tail4 = 1;
    for (int rest = 1; rest < 32; ++rest) {
        for (int np = 0; np + rest <= 64; np += 16) {
            const float got = leftovers(x, y, np, np + rest, 0.25f);
            tail8 &= got == model(x + np, y + np, rest, 8, 0.25f);
            tail4 &= got == model(x + np, y + np, rest, 4, 0.25f);
        }
    }
    puts(tap_fused && !tap_rounded && tail8 && !tail4   ? "min_8_lanes"
         : tap_rounded && !tap_fused && tail4 && !tail8 ? "min_4_lanes"
                                                        : "undecided");
    return 0;
}
"""


@functools.cache
def native_loop_vectors() -> str:
    """How a native llama.cpp build's compiler vectorizes ggml's small loops on this machine
    (what CMake's default `c++`/$CXX makes of them at ggml's -O3 -march=native)."""
    return probe_loop_vectors(("-O3", "-march=native"))


def probe_loop_vectors(flags: tuple[str, ...]) -> str:
    """The `ggml_loop_vectors` form this machine's C++ compiler gives ggml's loops under flags.

    Compiling the probe costs most of a small v8-build, so a known form is kept on disk,
    keyed by everything the answer depends on (see `_probe_record`)."""
    compiler = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if compiler is None:
        raise HostError(f"ggml_loop_vectors = native: no C++ compiler to probe; set "
                        f"ggml_loop_vectors to one of {', '.join(LOOP_VECTORS)}")
    record = _probe_record(compiler, flags)
    try:
        known = record.read_text().strip()
    except OSError:
        known = ""
    if known in LOOP_VECTORS:
        return known
    form = _run_loop_probe(compiler, flags)
    _keep(record, form)
    return form


def _probe_record(compiler: str, flags: tuple[str, ...]) -> Path:
    """The cache file of one probe: the compiler (its resolved path and the driver's bytes,
    never a file time), the flags, the probe's source and the CPU (-march=native)."""
    from v8dialect.runtime.cbuild import cache_root

    h = hashlib.sha256()
    for part in (os.path.realpath(compiler), *flags, _LOOP_PROBE, cpu_model(), " ".join(sorted(cpu_flags()))):
        h.update(part.encode())
        h.update(b"\0")
    h.update(Path(compiler).read_bytes())
    return cache_root() / "host" / f"loop_vectors-{h.hexdigest()[:32]}"


def _keep(record: Path, form: str) -> None:
    staging = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(form + "\n")
        os.replace(staging, record)  # published whole
    except OSError:
        staging.unlink(missing_ok=True)  # an unwritable cache only costs the next probe


def _run_loop_probe(compiler: str, flags: tuple[str, ...]) -> str:
    choices = ", ".join(LOOP_VECTORS)
    with tempfile.TemporaryDirectory() as folder:
        source, binary = Path(folder) / "loop_probe.cpp", Path(folder) / "loop_probe"
        source.write_text(_LOOP_PROBE)
        build = subprocess.run([compiler, *flags, str(source), "-o", str(binary)],
                               capture_output=True, text=True)
        if build.returncode != 0:
            raise HostError(f"ggml_loop_vectors = native: the probe does not compile with "
                            f"{compiler} ({build.stderr.strip()[:200]}); set ggml_loop_vectors "
                            f"to one of {choices}")
        ran = subprocess.run([str(binary), "4"], capture_output=True, text=True)
        form = ran.stdout.strip()
    if ran.returncode != 0:
        raise HostError(f"ggml_loop_vectors = native: the probe built with {' '.join(flags)} does not "
                        f"run on this CPU (exit status {ran.returncode}); set ggml_loop_vectors "
                        f"to one of {choices}")
    if form not in LOOP_VECTORS:
        raise HostError(f"ggml_loop_vectors = native: {compiler} vectorizes ggml's small loops "
                        f"in neither known form ({form!r}); set ggml_loop_vectors to one of "
                        f"{choices}")
    return form
