"""Quantized linear: ours vs ggml mul_mat in one process (not run in CI).

For each case the same Q4_K weight bytes (ggml_quantize_chunk) and the same
f32 activation go through ggml's mul_mat graph and through our production /
threadpool entry points; reports median wall time of repeated runs, the ratio
ours/ggml (target <= 1.0), weight-streaming GB/s, and a bit-exact check.

    python bench/quant_vs_ggml.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "runtime_c" / "quant"))
from ql_support import QL, GgmlLinear, bitexact, import_ggml, make_activation, make_weights  # noqa: E402

CASES = [("q4_k", 4096, 4096, 1), ("q4_k", 151936, 1024, 1), ("q4_k", 4096, 4096, 32),
         ("q6_k", 4096, 4096, 1)]


def paired_median_ms(a: Callable[[], object], b: Callable[[], object],
                     repeats: int) -> tuple[float, float]:
    """Median times of a and b, run alternately so load on a shared host hits both alike."""
    a()
    b()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    ggml = import_ggml()
    if ggml is None:
        print("ggml-python not importable; nothing to compare against")
        return 1
    ql = QL()
    print(f"{'case':<28}{'thr':>4}{'ggml ms':>10}{'ours ms':>10}{'ratio':>8}"
          f"{'ggml GB/s':>11}{'ours GB/s':>11}  bitexact")
    for fmt, n, k, m in CASES:
        w = make_weights(n, k, 1)
        runner = GgmlLinear(ggml, fmt, n, k, m)
        wq = runner.quantize(w)
        del w
        x = make_activation(k, 2, None if m == 1 else m)
        xs = np.ascontiguousarray(x.reshape(m, k))
        runner.run(xs, 1)
        gemv = m == 1
        y = np.empty((n,) if gemv else (m, n), dtype=np.float32)
        scratch = np.zeros(ql.lib.v8_ql_gemm_scratch_bytes(m, k) // 4 + 1, dtype=np.float32)
        sel = (ql.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER if fmt == "q4_k"
               else ql.lib.V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER)
        pw, px, py = ql.ptr(wq, "void *"), ql.ptr(xs, "float *"), ql.ptr(y, "float *")
        ps, nbytes = ql.ptr(scratch, "void *"), scratch.nbytes
        name = f"v8_{fmt}_{'gemv' if gemv else 'gemm'}"
        dims = (n, k) if gemv else (m, n, k)
        serial = getattr(ql.lib, name)
        pooled = getattr(ql.lib, name + "_parallel_dispatch")
        for threads in (1, 2):
            pool = ql.pool(threads)
            if threads == 1:
                def ours(serial=serial) -> object:
                    return serial(sel, py, pw, px, ql.ffi.NULL, *dims, ps, nbytes)
            else:
                def ours(pooled=pooled, pool=pool) -> object:
                    return pooled(pool, sel, py, pw, px, ql.ffi.NULL, *dims, ps, nbytes)
            t_g, t_o = paired_median_ms(lambda threads=threads: runner.compute(threads), ours,
                                        args.repeats)
            assert ours() == 0
            y_g = runner.output()
            same, total = bitexact(y.reshape(m, n), y_g)
            gb = wq.nbytes / 1e9
            label = f"{fmt} {'GEMV' if gemv else f'GEMM M={m}'} {n}x{k}"
            print(f"{label:<28}{threads:>4}{t_g:>10.3f}{t_o:>10.3f}{t_o / t_g:>8.2f}"
                  f"{gb / (t_g / 1e3):>11.1f}{gb / (t_o / 1e3):>11.1f}  {same}/{total}")
        runner.close()
    ql.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
