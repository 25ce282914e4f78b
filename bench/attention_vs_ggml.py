"""Attention: ours vs ggml's flash_attn_ext in one process, same shapes and
thread count, median of repeated runs; prints ours/ggml and whether the
outputs are bit-identical.  Not part of the test run.

    python bench/attention_vs_ggml.py [--repeats N]

Rows: decode H=32 Hkv=8 D=128 at KV 1058 and 4096 (split-KV contract
f16_online_fp32_merge, provider attn_online_split_f16kv); prefill Q=64
KV=1024 D=128 and full (non-causal) T=256 H=16 D=72 (tiled contract
f16_kv_tiled64_fp32_softmax_fp64_sum_update, provider attn_tiled64_f16kv,
when runtime_c/attention/tiled.c is present)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test" / "runtime_c" / "attention"))

import online_model as M  # noqa: E402
from v8dialect.paths import runtime_c_dir  # noqa: E402

TILED_CDEF = """
size_t v8_attn_tiled_scratch_bytes(int64_t n_q, int64_t n_head, int64_t head_dim, int n_workers);
v8_status v8_attn_tiled_parallel_dispatch(v8_threadpool *pool, int contract, float *out,
    const float *q, const void *k, const void *v, int64_t n_q, int64_t n_head, int64_t n_head_kv,
    int64_t head_dim, int64_t kv_len, int64_t kv_capacity, int64_t q_pos0, int causal, float scale,
    void *scratch, size_t scratch_bytes);
"""


def build():
    have_tiled = (runtime_c_dir() / "attention" / "tiled.c").exists()
    if have_tiled:
        try:
            return M.build_online(extra_sources=("attention/tiled.c",), extra_cdef=TILED_CDEF,
                                  extra_headers=("attention/v8_attention_tiled.h",),
                                  name="v8_attn_bench"), True
        except Exception as exc:  # the other provider may be mid-change
            print(f"# tiled provider not buildable: {exc}")
    return M.build_online(), False


def median_time(fn, repeats):
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    opts = ap.parse_args()
    repeats = opts.repeats
    mod, have_tiled = build()
    on = M.Online(mod)
    ffi, lib = on.ffi, on.lib
    gg = M.GgmlFlashAttn()
    rng = np.random.default_rng(0)
    rows = [("decode H32/8 D128 KV1058", 1, 32, 8, 128, 1058, 1057, 1, "split"),
            ("decode H32/8 D128 KV4096", 1, 32, 8, 128, 4096, 4095, 1, "split")]
    if have_tiled:
        rows += [("prefill Q64 KV1024 H32/8 D128", 64, 32, 8, 128, 1024, 960, 1, "tiled"),
                 ("full T256 H16 D72", 256, 16, 16, 72, 256, 0, 0, "tiled")]
    print(f"{'row':34s} {'thr':>3s} {'ours ms':>9s} {'ggml ms':>9s} {'ratio':>6s} bit-exact")
    for name, n_q, h, hkv, d, kv, p0, causal, kind in rows:
        q = rng.standard_normal((n_q, h, d)).astype(np.float32)
        k = rng.standard_normal((hkv, kv, d)).astype(np.float16).view(np.uint16)
        v = rng.standard_normal((hkv, kv, d)).astype(np.float16).view(np.uint16)
        scale = float(np.float32(1 / np.sqrt(d)))
        for threads in (1, 2):
            pool = on.pool(threads)
            out = np.empty((n_q, h, d), np.float32)
            if kind == "split":
                fn, contract = lib.v8_attn_online_split_parallel_dispatch, 6
                nbytes = int(lib.v8_attn_online_split_scratch_bytes(n_q, h, d, threads))
            else:
                fn, contract = lib.v8_attn_tiled_parallel_dispatch, 7
                nbytes = int(lib.v8_attn_tiled_scratch_bytes(n_q, h, d, threads))
            scratch = ffi.new("char[]", max(nbytes, 1))
            call = (pool, contract, ffi.cast("float *", out.ctypes.data),
                    ffi.cast("float *", q.ctypes.data), ffi.cast("void *", k.ctypes.data),
                    ffi.cast("void *", v.ctypes.data), n_q, h, hkv, d, kv, kv, p0, causal, scale,
                    scratch, nbytes)
            status = [0]

            def ours():
                status[0] = fn(*call)

            t_ours = median_time(ours, repeats)
            timings: list[float] = []
            ref = gg.run(q, k, v, hkv, kv, p0, bool(causal), scale, threads,
                         repeats=repeats + 1, timings=timings)
            t_gg = statistics.median(timings[1:])
            exact = status[0] == 0 and np.array_equal(out.view(np.uint32), ref.view(np.uint32))
            print(f"{name:34s} {threads:3d} {t_ours * 1e3:9.3f} {t_gg * 1e3:9.3f} "
                  f"{t_ours / t_gg:6.2f} {exact}")


if __name__ == "__main__":
    main()
