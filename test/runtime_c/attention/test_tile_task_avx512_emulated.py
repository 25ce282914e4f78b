"""The AVX-512 variants of the attention tile task and of online attention's score block, run on
any AVX2 host through a lane-by-lane emulation of the _mm512 intrinsics (avx512_emulation.h), so
that a host without AVX-512 still checks them bit for bit.

The tile task (tile_task_body.inc over core/simd.h with V8_SIMD_AVX512, as runtime_c's tiled.c
and llama_regular.c include it) runs for the three contracts it delivers (tiled: 16-key groups
with exp16, 8-key groups with the AVX2-form vexp; llama-regular) and must equal the scalar oracle
the provider tests compare production against (v8_attn_tiled_ref, v8_attn_llama_regular_ref,
natively built).  Online attention's AVX-512 score block (online_simd.inc's scores_avx512) must
equal its F32X16X4 tree stated in C.  The same harness, run once on the sources before core/simd.h
existed, found the old and new AVX-512 code bit-identical on every case here.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiled_model import F32, SELECTORS, build_lib, build_llama_regular, make_case, mismatch

from v8dialect.data.c_abi import constants
from v8dialect.data.paths import runtime_c_dir
from v8dialect.runtime.cbuild import BASE_CFLAGS, RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

HERE = Path(__file__).resolve().parent
HARNESS_C = HERE / "tile_task_avx512_emulated.c"
V8_OK = constants(["v8_runtime.h"])["V8_OK"]

CONTRACTS = {
    "tiled16": "f16_kv_tiled64_fp32_softmax_fp64_sum_update",
    "tiled8": "f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp",
    "regular": "fp32_llama_regular",
}
PROVIDERS = {  # provider -> the harness selector and the C source it includes
    "tiled": ("EMU_TILED", runtime_c_dir() / "attention" / "tiled.c"),
    "regular": ("EMU_REGULAR", runtime_c_dir() / "attention" / "llama_regular.c"),
}
EMU_CDEF = """
    int emu_avx512_attn(int contract, float *out, const float *q, const void *k, const void *v,
                        int64_t n_q, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                        int64_t kv_len, int64_t kv_capacity, int64_t q_pos0, int causal,
                        int64_t window, float scale, void *scratch, size_t scratch_bytes);
"""
HSUM_CDEF = "void emu_hsum16(const float *x, float *out);"


def provider(contract: str) -> str:
    return "regular" if contract == "regular" else "tiled"


@functools.cache
def emulated(prov: str) -> Any:
    """The provider built on the emulation (cached by content like every cffi build)."""
    macro, source = PROVIDERS[prov]
    includes = [source]
    # the object cache keys sources by their own bytes and the headers', not by a .c they
    # include: the included sources' digests are spelled into the module's source text
    stamp = "".join(f"/* {p.name} {hashlib.sha256(p.read_bytes()).hexdigest()} */\n"
                    for p in [HARNESS_C, *includes])
    cdef = runtime_cdef() + EMU_CDEF + (HSUM_CDEF if macro == "EMU_TILED" else "")
    return build(CBuild(
        name=f"v8_tile_task_avx512_emulated_{prov}", cdef=cdef,
        source=f"{stamp}#define {macro} 1\n#include \"tile_task_avx512_emulated.c\"\n",
        runtime_sources=RUNTIME_CORE_SOURCES,
        include_dirs=(HERE, runtime_c_dir() / "attention"),
        cflags=(*BASE_CFLAGS, "-mavx2", "-mfma", "-mf16c")))


@functools.cache
def oracle_lib(prov: str) -> Any:
    return build_llama_regular() if prov == "regular" else build_lib()


def _args(ffi: Any, selector: int, case: Any, out: np.ndarray, scratch: Any, nbytes: int) -> list:
    return [selector, ffi.cast("float *", ffi.from_buffer(out)),
            ffi.cast("const float *", ffi.from_buffer(case.q)),
            ffi.cast("const void *", ffi.from_buffer(case.k16)),
            ffi.cast("const void *", ffi.from_buffer(case.v16)),
            case.n_q, case.n_head, case.n_head_kv, case.head_dim, case.kv_len, case.capacity,
            case.q_pos0, int(case.causal), case.window, case.scale, scratch, nbytes]


def scratch_bytes(prov: str, case: Any) -> int:
    lib = oracle_lib(prov).lib
    fn = lib.v8_attn_llama_regular_scratch_bytes if prov == "regular" else lib.v8_attn_tiled_scratch_bytes
    return int(fn(case.n_q, case.n_head, case.head_dim, 1))


def run_oracle(contract: str, case: Any) -> np.ndarray:
    prov = provider(contract)
    mod = oracle_lib(prov)
    nbytes = scratch_bytes(prov, case)
    out = np.full(case.q.shape, np.nan, F32)
    scratch = mod.ffi.new("char[]", nbytes)
    fn = mod.lib.v8_attn_llama_regular_ref if prov == "regular" else mod.lib.v8_attn_tiled_ref
    assert fn(*_args(mod.ffi, SELECTORS[CONTRACTS[contract]], case, out, scratch, nbytes)) == V8_OK
    return out


def run_emulated(contract: str, case: Any) -> np.ndarray:
    prov = provider(contract)
    mod = emulated(prov)
    nbytes = scratch_bytes(prov, case)
    out = np.full(case.q.shape, np.nan, F32)
    scratch = mod.ffi.new("char[]", nbytes)
    st = mod.lib.emu_avx512_attn(*_args(mod.ffi, SELECTORS[CONTRACTS[contract]], case, out,
                                        scratch, nbytes))
    assert st == V8_OK
    return out


def first_difference(a: np.ndarray, b: np.ndarray) -> str:
    diff = np.argwhere(a.view(np.uint32) != b.view(np.uint32))
    if not diff.size:
        return "none"
    idx = tuple(int(i) for i in diff[0])
    return (f"{len(diff)} of {a.size} elements differ; first [row, head, d] = {list(idx)}: "
            f"{float(a[idx])!r} ({int(a.view(np.uint32)[idx]):#010x}) vs "
            f"{float(b[idx])!r} ({int(b.view(np.uint32)[idx]):#010x})")


# (n_q, past, H, Hkv, D, causal, window, q_mult): query counts around the 64-row tile, past KV
# 0 / 5 / 1013 (key tiles from 1 to 18, partial last tiles), GQA 32/8, 8/2, 16/16 and 4/1,
# head dims 64, 72, 80, 128 and 8, 24 (below one 16-lane vector: only the masked P.V tail), causal
# and full masks, sliding windows shorter than, equal to and longer than a key tile, and inputs
# scaled so that exp underflows (subnormal probabilities, exp's |n| > 126 and > 192 branches).
SHAPES = [
    (1, 0, 8, 2, 64, True, 0, 1.0),
    (5, 0, 32, 8, 72, True, 0, 1.0),
    (63, 5, 16, 16, 80, True, 0, 1.0),
    (64, 0, 8, 2, 128, True, 0, 1.0),
    (65, 5, 8, 2, 64, True, 0, 1.0),
    (130, 5, 4, 1, 72, True, 0, 1.0),
    (1, 1013, 8, 2, 128, True, 0, 1.0),
    (65, 1013, 2, 1, 80, True, 0, 1.0),
    (130, 1013, 2, 2, 128, True, 0, 1.0),
    (5, 1013, 8, 2, 64, False, 0, 1.0),
    (64, 5, 16, 16, 72, False, 0, 1.0),
    (130, 0, 4, 2, 80, False, 0, 1.0),
    (63, 40, 4, 1, 64, True, 7, 1.0),
    (130, 300, 2, 1, 128, True, 64, 1.0),
    (65, 1013, 2, 1, 72, True, 100, 1.0),
    (5, 1013, 4, 2, 80, True, 1000, 1.0),
    (63, 5, 4, 2, 24, True, 0, 1.0),
    (65, 0, 2, 1, 8, False, 0, 1.0),
    (65, 40, 4, 2, 64, True, 0, 64.0),
    (130, 5, 2, 1, 128, False, 0, 256.0),
]


def shape_id(s: tuple) -> str:
    n_q, past, h, hkv, d, causal, window, qm = s
    return (f"q{n_q}-past{past}-h{h}x{hkv}-d{d}-{'causal' if causal else 'full'}"
            + (f"-w{window}" if window else "") + (f"-qx{qm:g}" if qm != 1.0 else ""))


@functools.cache
def case(shape: tuple) -> Any:
    n_q, past, h, hkv, d, causal, window, q_mult = shape
    c = make_case(1000 + 7 * n_q + past + d + h, n_q, past, h, hkv, d, causal=causal,
                  window=window)
    c.q = np.ascontiguousarray(c.q * F32(q_mult), dtype=F32)
    return c


@pytest.fixture(scope="module", autouse=True)
def _needs_avx2() -> None:
    if oracle_lib("tiled").lib.v8_cpu_best_isa() < 1:
        pytest.skip("the emulation build needs AVX2, FMA and F16C")


@pytest.mark.parametrize("contract", list(CONTRACTS))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_avx512_tile_task_equals_the_oracle(shape: tuple, contract: str) -> None:
    c = case(shape)
    ref = run_oracle(contract, c)
    got = run_emulated(contract, c)
    assert np.isfinite(ref).all()
    assert mismatch(got, ref)[0] == 0, f"AVX-512 vs oracle: {first_difference(got, ref)}"


def test_inputs_reach_exp_underflow() -> None:
    """The scaled cases do take exp16's |n| > 192 branch and give subnormal probabilities
    (x = s - M below -87 and -103 for some visible key), so those lanes are compared too."""
    c = case(SHAPES[-2])
    q = c.q.astype(np.float64)
    k = c.k16.astype(np.float64)
    s = np.einsum("qhd,hkd->qhk", q, np.repeat(k, c.n_head // c.n_head_kv, axis=0)) * c.scale
    visible = np.arange(c.kv_len)[None, :] <= (c.q_pos0 + np.arange(c.n_q))[:, None]
    s = np.where(visible[:, None, :], s[:, :, :c.kv_len], -np.inf)
    x = s - s.max(axis=2, keepdims=True)
    x = x[np.isfinite(x)]
    assert (x < -192 * np.log(2)).any() and ((x < -88) & (x > -103)).any()


def test_emulated_reduction_trees_agree() -> None:
    """_mm512_reduce_add_ps as GCC's header computes it, core/simd.h's v8_hsum_halves_avx512 on
    the emulation and its scalar reference v8_hsum_halves_ref: one tree, bit for bit, on inputs
    whose partial sums cancel (any other order rounds differently on many of them)."""
    mod = emulated("tiled")
    rng = np.random.default_rng(5)
    out = np.zeros(3, F32)
    other_order = 0
    for _ in range(2000):
        x = (rng.standard_normal(16) * np.exp2(rng.integers(-20, 20, 16))).astype(F32)
        mod.lib.emu_hsum16(mod.ffi.cast("const float *", mod.ffi.from_buffer(x)),
                           mod.ffi.cast("float *", mod.ffi.from_buffer(out)))
        assert out[0].view(np.uint32) == out[1].view(np.uint32) == out[2].view(np.uint32), x
        seq = F32(0)
        for v in x:
            seq = F32(seq + v)
        other_order += int(seq.view(np.uint32) != out[0].view(np.uint32))
    assert other_order > 100  # the inputs do tell trees apart


# ---- online attention's AVX-512 score block ---------------------------------------------------

AVX512_REGION = '#define V8_SIMD_AVX512\n#include "core/simd.h"\n'  # online_simd.inc's plain one


def c_function(text: str, name: str) -> str:
    """The definition of static function `name` in `text`: from its line to the first '}' line."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("static") and f" {name}(" in line)
    end = next(i for i in range(start, len(lines)) if lines[i] == "}\n")
    return "".join(lines[start:end + 1])




@functools.cache
def online_emulated() -> Any:
    """scores_avx512 of online_simd.inc on the emulation (the rest of online.c needs
    AVX512-FP16 arithmetic, which the emulation does not provide): the plain AVX-512
    variant's V8_SIMD_FN(scores) and ld_h16, under the same core/simd.h selection."""
    text = (runtime_c_dir() / "attention" / "online_simd.inc").read_text()
    region = text[text.index(AVX512_REGION):]
    entry = HERE / "online_scores_avx512_emulated.c"
    source = (f"/* {hashlib.sha256(entry.read_bytes()).hexdigest()} */\n"
              "#define V8_SIMD_EMULATED 1\n"
              '#include "avx512_emulation.h"\n'
              '#include "v8_runtime.h"\n'
              '#include "attention/v8_attention.h"\n'
              + AVX512_REGION
              + "#define SCORE_BLOCK 64\n"
              "static inline float h2f(uint16_t h) { return v8_f16_to_f32(h); }\n"
              + c_function(text, "tail_f64") + c_function(region, "ld_h16")
              + c_function(region, "V8_SIMD_FN(scores)")
              + '#include "core/simd_end.h"\n'
              '#include "online_scores_avx512_emulated.c"\n')
    cdef = runtime_cdef() + """
        void emu_online_scores(const uint16_t *k0, int64_t n, const uint16_t *q16, int64_t d,
                               float scale, float *out);
        void emu_online_scores_ref(const uint16_t *k0, int64_t n, const uint16_t *q16,
                                   int64_t d, float scale, float *out);"""
    return build(CBuild(name="v8_online_scores_avx512_emulated", cdef=cdef, source=source,
                        runtime_sources=RUNTIME_CORE_SOURCES, include_dirs=(HERE,),
                        cflags=(*BASE_CFLAGS, "-mavx2", "-mfma", "-mf16c")))


@pytest.mark.parametrize("d", [64, 72, 80, 128, 8, 200])
def test_online_avx512_scores_equal_the_stated_tree(d: int) -> None:
    """A block of 64 keys (and 1, 5, 63) against one fp16 query, rows spanning magnitudes:
    the AVX-512 score block equals the F32X16X4 tree stated in C, bit for bit."""
    mod = online_emulated()
    ffi, lib = mod.ffi, mod.lib
    rng = np.random.default_rng(d)
    for n in (64, 1, 5, 63):
        k = (rng.standard_normal((n, d)) * np.exp2(rng.uniform(-4, 4, (n, 1)))).astype(np.float16)
        q = (rng.standard_normal(d) * 4).astype(np.float16)
        outs = {}
        for name in ("avx512", "ref"):
            out = np.full(n, np.nan, F32)
            args = (ffi.cast("const uint16_t *", ffi.from_buffer(k)), n,
                    ffi.cast("const uint16_t *", ffi.from_buffer(q)), d, F32(1 / np.sqrt(d)),
                    ffi.cast("float *", ffi.from_buffer(out)))
            if name == "ref":
                lib.emu_online_scores_ref(*args)
            else:
                lib.emu_online_scores(*args)
            outs[name] = out
        assert np.isfinite(outs["ref"]).all()
        assert mismatch(outs["avx512"], outs["ref"])[0] == 0, (d, n, outs["avx512"], outs["ref"])
