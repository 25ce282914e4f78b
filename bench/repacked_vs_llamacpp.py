"""Repacked Q4_K linear: ours vs llama.cpp's repacked kernels in one process (not run in CI).

The kernels a llama.cpp-arithmetic model runs for its Q4_K projections: llama.cpp's model
loader puts Q4_K weights into its CPU_REPACK buffer, whose GEMV (one token) and GEMM (a
prompt) are the q4_K_8x8 kernels; ours are the x16 GEMV on its interleaved layout (made
once at load) and the repacked GEMM on the plain GGUF rows, under the same contracts
(q4_k_x_q8_k_fp32_repacked_super_block_chain / _4_row_groups).  Same weight bytes
(llama.cpp's own quantizer), same activation, same thread count; the two run alternately
after idle gaps (bench/timing.py).  Prints median and minimum wall time, ours/llama.cpp of
both, weight-streaming GB/s and a bit-exact count against llama.cpp's output.

    python bench/repacked_vs_llamacpp.py [--repeats 30] [--threads 1,2] [--cpu-mask 0x7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "test" / "runtime_c" / "quant_repacked"))
from qr_support import bitexact, make_activation, make_weights  # noqa: E402
from test_quant_repacked_x16 import QX  # noqa: E402
from timing import alternating, warm_alternating  # noqa: E402

from v8dialect.runtime.host import cpu_model  # noqa: E402

# (kind, n, k, m): the x16 GEMV at decode, the repacked GEMM at prefill
CASES = [("gemv", 4096, 4096, 1), ("gemv", 3072, 1024, 1),
         ("gemm", 3072, 1024, 64), ("gemm", 4096, 4096, 32)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cpu-mask", type=lambda v: int(v, 0), default=0xFFFFFFFF,
                    help="v8_cpu_restrict mask for our kernels (llama.cpp keeps its own build's)")
    args = ap.parse_args()
    from v8dialect.parity.ggml_ops import GgmlOps

    ggml = GgmlOps()
    qx = QX()
    qx.lib.v8_cpu_restrict(args.cpu_mask)
    isa = {0: "scalar", 1: "avx2", 2: "avx512"}[qx.lib.v8_cpu_best_isa()]
    print(f"CPU: {cpu_model()}, cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, "
          f"ours: {isa}")
    print(f"{'case':<36}{'thr':>4}{'llama ms':>10}{'ours ms':>10}{'ratio':>7}{'llama min':>10}"
          f"{'ours min':>10}{'ratio':>7}{'llama GB/s':>11}{'ours GB/s':>10}{'warm llama':>11}"
          f"{'warm ours':>10}{'ratio':>7}  bitexact")
    for kind, n, k, m in CASES:
        w = ggml.quantize("q4_k", make_weights(n, k, 1))
        x = np.ascontiguousarray(make_activation(m, k, 2))
        label = f"q4_k repacked {'GEMV' if kind == 'gemv' else f'GEMM M={m}'} {n}x{k}"
        wx = qx.repack(w, n, k) if kind == "gemv" else w
        for threads in (int(t) for t in args.threads.split(",")):
            y = np.empty((m, n), np.float32)
            if kind == "gemv":
                size = qx.lib.v8_q4_k_x16_gemv_scratch_bytes(k)
                fn, dims = qx.lib.v8_q4_k_x16_gemv_parallel_dispatch, (n, k)
            else:
                size = qx.lib.v8_qlr_gemm_scratch_bytes(m, k)
                fn, dims = qx.lib.v8_q4_k_repacked_gemm_parallel_dispatch, (m, n, k)
            sel = (qx.lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_SUPER_BLOCK_CHAIN if kind == "gemv"
                   else qx.lib.V8_QL_Q4_K_X_Q8_K_FP32_REPACKED_4_ROW_GROUPS)
            scratch = np.zeros(size // 4 + 1, np.float32)
            call = (qx.pool(threads), sel, qx.ptr(y, "float *"), qx.ptr(wx, "void *"),
                    qx.ptr(x, "float *"), qx.ffi.NULL, *dims, qx.ptr(scratch, "void *"), size)
            status = [0]

            def ours(fn=fn, call=call, status=status) -> None:
                status[0] = fn(*call)

            with ggml.repacked_mul_mat(w, "q4_k", x, k, threads) as theirs:
                if not theirs.repacked:
                    print(f"{label:<36}{threads:>4}  llama.cpp kept the weight plain: no row")
                    continue
                tl, to = alternating(theirs.compute, ours, args.repeats)
                wl, wo = warm_alternating(theirs.compute, ours, max(args.repeats // 4, 3))
                same, total = bitexact(y, theirs.output())
            assert status[0] == 0
            t_l, t_o = statistics.median(tl) * 1e3, statistics.median(to) * 1e3
            n_l, n_o = min(tl) * 1e3, min(to) * 1e3
            w_l, w_o = statistics.median(wl) * 1e3, statistics.median(wo) * 1e3
            gb = w.nbytes / 1e9
            print(f"{label:<36}{threads:>4}{t_l:>10.3f}{t_o:>10.3f}{t_o / t_l:>7.2f}{n_l:>10.3f}"
                  f"{n_o:>10.3f}{n_o / n_l:>7.2f}{gb / (t_l / 1e3):>11.1f}{gb / (t_o / 1e3):>10.1f}"
                  f"{w_l:>11.3f}{w_o:>10.3f}{w_o / w_l:>7.2f}  {same}/{total}", flush=True)
    qx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
