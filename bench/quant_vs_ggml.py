"""Quantized linear: ours vs ggml mul_mat in one process (not run in CI).

For each case the same Q4_K / Q6_K weight bytes (ggml_quantize_chunk) and the
same f32 activation go through ggml's mul_mat graph and through our
production / threadpool entry points, at the same thread count.  The two are
run alternately (bench/timing.py: which goes first alternates, each call after
an idle gap so neither side's spinning workers take the other's cores);
reports median and minimum wall time of the repeats, the
ratio ours/ggml of the medians (target <= 1.0) and of the minima, weight-
streaming GB/s (from the medians), a bit-exact check, and the 1-minute load
average around each case (a host with load above its core count measures
contention more than kernels; the minima are then the steadier figures).
The warm columns time back-to-back bursts with each side's workers awake (as
in a model's decode step), their medians and ratio.

    python bench/quant_vs_ggml.py [--repeats 60] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "runtime_c" / "quant"))
from ql_support import QL, GgmlLinear, bitexact, import_ggml, make_activation, make_weights  # noqa: E402
from timing import alternating, warm_alternating  # noqa: E402

from v8dialect.runtime.host import cpu_model  # noqa: E402

CASES = [("q4_k", 4096, 4096, 1), ("q4_k", 151936, 1024, 1), ("q4_k", 4096, 4096, 32),
         ("q6_k", 4096, 4096, 1), ("q6_k", 4096, 4096, 32)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    ap.add_argument("--cpu-mask", type=lambda v: int(v, 0), default=0xFFFFFFFF,
                    help="v8_cpu_restrict mask for our kernels, e.g. 0x7 = AVX2 path "
                         "(ggml keeps its own dispatch)")
    args = ap.parse_args()
    threads_list = [int(t) for t in args.threads.split(",")]
    cases = CASES if not args.cases else [CASES[int(i)] for i in args.cases.split(",")]
    ggml = import_ggml()
    if ggml is None:
        print("ggml-python not importable; nothing to compare against")
        return 1
    ql = QL()
    ql.lib.v8_cpu_restrict(args.cpu_mask)
    isa = {0: "scalar", 1: "avx2", 2: "avx512"}[ql.lib.v8_cpu_best_isa()]
    vnni = "+vnni" if ql.lib.v8_cpu_features() & (1 << 7) else ""
    print(f"CPU: {cpu_model()}, cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.2f}, ours: {isa}{vnni}")
    print(f"{'case':<28}{'thr':>4}{'ggml ms':>10}{'ours ms':>10}{'ratio':>7}"
          f"{'ggml min':>10}{'ours min':>10}{'ratio':>7}"
          f"{'ggml GB/s':>10}{'ours GB/s':>10}{'warm ggml':>10}{'warm ours':>10}{'ratio':>7}"
          f"  bitexact  load")
    for fmt, n, k, m in cases:
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
        for threads in threads_list:
            pool = ql.pool(threads)
            if threads == 1:
                def ours(serial=serial) -> object:
                    return serial(sel, py, pw, px, ql.ffi.NULL, *dims, ps, nbytes)
            else:
                def ours(pooled=pooled, pool=pool) -> object:
                    return pooled(pool, sel, py, pw, px, ql.ffi.NULL, *dims, ps, nbytes)
            load0 = os.getloadavg()[0]
            theirs = lambda threads=threads: runner.compute(threads)  # noqa: E731
            tg, to = alternating(theirs, ours, args.repeats)
            wg, wo = warm_alternating(theirs, ours, max(args.repeats // 4, 3))
            w_g, w_o = statistics.median(wg) * 1e3, statistics.median(wo) * 1e3
            load1 = os.getloadavg()[0]
            t_g, t_o = statistics.median(tg) * 1e3, statistics.median(to) * 1e3
            n_g, n_o = min(tg) * 1e3, min(to) * 1e3
            assert ours() == 0
            y_g = runner.output()
            same, total = bitexact(y.reshape(m, n), y_g)
            gb = wq.nbytes / 1e9
            label = f"{fmt} {'GEMV' if gemv else f'GEMM M={m}'} {n}x{k}"
            print(f"{label:<28}{threads:>4}{t_g:>10.3f}{t_o:>10.3f}{t_o / t_g:>7.2f}"
                  f"{n_g:>10.3f}{n_o:>10.3f}{n_o / n_g:>7.2f}"
                  f"{gb / (t_g / 1e3):>10.1f}{gb / (t_o / 1e3):>10.1f}"
                  f"{w_g:>10.3f}{w_o:>10.3f}{w_o / w_g:>7.2f}  {same}/{total}"
                  f"  {load0:.1f}-{load1:.1f}", flush=True)
        runner.close()
    ql.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
