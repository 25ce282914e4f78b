"""Attention: ours vs ggml's flash_attn_ext in one process, same shapes and
thread count, median of repeated runs; prints ours/ggml and whether the
outputs are bit-identical.  Not part of the test run.

    python bench/attention_vs_ggml.py [--repeats N] [--rows SUBSTRING]

The ggml is llama.cpp's own (v8dialect.parity.ggml_ops, the libggml that
llama-cpp-python ships), whose arithmetic the fp32-dot contracts name; its
graph runs on a CPU backend with its persistent threads, as in llama.cpp, over
llama.cpp's KV extent (the keys rounded up to 256, the rest masked).
The ggml graph is built once per row and thread count, and ours and ggml
run alternately (bench/timing.py: the order flips every repeat and each
call starts after an idle gap, so neither side's spinning workers take the
other's cores); then the same alternation of warm bursts, back-to-back calls
with each side's workers awake as in a model's decode step (the warm columns).
A decode step reads each layer's K/V rows once, from DRAM: the cold columns of the
decode rows time warm bursts over copies of K/V in turn (COLD_LAYERS, or more where
those fit in the last-level cache; each side its own copies, a graph per copy for
ggml), per call.
The load average is printed before and after.

Rows: decode H=32 Hkv=8 D=128 at KV 1058 and 4096, and H=16 Hkv=8 (the whole-model
benchmark's shape) at KV 1025 and 129 (split-KV contract
f16_online_fp32_merge_fp32_dot, provider attn_online_split_f16kv); prefill Q=64
KV=1024 D=128 and full (non-causal) T=256 H=16 D=72, once under the tiled
contract and once under the auto contract (ggml's own rule for when to tile).
Each row runs the contract the circuits choose for the running ggml build
(ggml_contracts): fp32 dots, and with an AVX2 ggml the 8-lane tiled tree
(..._8_lane_vexp, f16_flash_auto_qtile64_fp32_dot_8_lane)."""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test" / "runtime_c" / "attention"))

import online_model as M  # noqa: E402
from timing import alternating, flipped, warm_alternating, warm_call  # noqa: E402

from v8dialect.data.paths import runtime_c_dir  # noqa: E402
from v8dialect.parity.ggml_ops import GgmlOps  # noqa: E402
from v8dialect.runtime.host import cpu_model  # noqa: E402


def build():
    """The online providers, with the tiled and auto ones when their sources are there; every
    declaration read from the attention headers."""
    from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, runtime_cdef
    from v8dialect.runtime.cbuild import build as cbuild

    have_tiled = (runtime_c_dir() / "attention" / "tiled.c").exists()
    if not have_tiled:
        return M.build_online(), False
    headers = ("attention/v8_attention.h", "attention/v8_attention_tiled.h")
    return cbuild(CBuild(name="v8_attn_bench", cdef=runtime_cdef(*headers),
                         source="".join(f'#include "{h}"\n' for h in headers),
                         runtime_sources=RUNTIME_CORE_SOURCES + M.ONLINE_SOURCES
                         + ("attention/tiled.c", "attention/tiled_auto.c",
                            "attention/llama_regular.c"))), True


def ggml_contracts(lib, ggml_build: str) -> dict[str, int]:
    """The selector of the contract that names the running ggml build's arithmetic, per row
    kind, as the circuits choose them: fp32 dots, and on an AVX2 build the 8-lane tiled tree
    (the selectors come from the headers, never as numbers)."""
    lanes8 = ggml_build == "avx2"
    return {"split": lib.V8_ATTN_F16_ONLINE_FP32_MERGE_FP32_DOT,
            "tiled": (lib.V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE_8_LANE_VEXP if lanes8
                      else lib.V8_ATTN_F16_KV_TILED64_FP32_SOFTMAX_FP64_SUM_UPDATE),
            "auto": (lib.V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT_8_LANE if lanes8
                     else lib.V8_ATTN_F16_FLASH_AUTO_QTILE64_FP32_DOT)}


# Layers of a decode step whose K/V rows the cold columns cycle through: a Qwen3-0.6B-shaped
# model's 28.  At a short context 28 layers' rows fit in the last-level cache, which a decode
# step's weights (hundreds of MB) flush between two layers' attention, so the cold columns
# then cycle through more copies: enough to fill the last-level cache twice over.
COLD_LAYERS = 28


@functools.cache
def last_level_cache_bytes() -> int:
    """The largest cache of the first CPU (sysfs), or 32 MiB where sysfs does not say."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        if text.rstrip("KM").isdigit():
            sizes.append(int(text.rstrip("KM")) * unit)
    return max(sizes, default=32 << 20)


def cold_copies(bytes_per_copy: int) -> int:
    """Copies of a layer's K/V rows the cold columns cycle through."""
    return max(COLD_LAYERS, -(-2 * last_level_cache_bytes() // bytes_per_copy))


def in_turn(calls):
    """One call that runs each of `calls` once, in order."""
    def run():
        for call in calls:
            call()
    return run


def cold_medians(calls_a, calls_b, repeats):
    """Median seconds per call of warm bursts that run each of calls_a (then calls_b) once
    in turn, the two sides alternating as bench/timing.py alternates them."""
    ta, tb = flipped(in_turn(calls_a), in_turn(calls_b), repeats,
                     lambda run: warm_call(run, burst=2))
    return statistics.median(ta) / len(calls_a), statistics.median(tb) / len(calls_b)


class OursCall:
    """One call of our provider on the given K/V rows: head + (k, v) + tail as its arguments,
    status[0] or-ed with its status.  It keeps the rows, as the call holds raw pointers into
    them."""

    def __init__(self, ffi, fn, status, head, tail, k_rows, v_rows):
        self.rows = (k_rows, v_rows)
        self.fn, self.status = fn, status
        self.args = (*head, ffi.cast("void *", k_rows.ctypes.data),
                     ffi.cast("void *", v_rows.ctypes.data), *tail)

    def __call__(self):
        self.status[0] |= self.fn(*self.args)


def cold_row(new_graph, ours_on, k, v, repeats, out, ref):
    """Cold columns of a decode row: each side's calls over cold_copies() copies of K/V in
    turn (new_graph() -> a ggml graph with its own copy, ours_on(k, v) -> our call on those
    rows); returns ours and ggml's seconds per call and whether every output of both sides'
    last calls is still the reference's."""
    copies = cold_copies(k.nbytes + v.nbytes)
    with ExitStack() as stack:
        graphs = [stack.enter_context(new_graph()) for _ in range(copies)]
        ours = [ours_on(k.copy(), v.copy()) for _ in range(copies)]
        c_ours, c_gg = cold_medians(ours, [g.compute for g in graphs], max(repeats // 3, 3))
        exact = np.array_equal(out.view(np.uint32), ref.view(np.uint32)) and all(
            np.array_equal(g.output().view(np.uint32), ref.view(np.uint32)) for g in graphs)
    return c_ours, c_gg, exact


def interleaved_medians(fa, fb, repeats):
    """Median seconds of fa and fb, run alternately after idle gaps, then the same of warm
    back-to-back bursts (bench/timing.py)."""
    ta, tb = alternating(fa, fb, repeats, warmup=1)
    wa, wb = warm_alternating(fa, fb, max(repeats // 3, 3))
    return (statistics.median(ta), statistics.median(tb),
            statistics.median(wa), statistics.median(wb))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rows", default="", help="only rows whose name contains this")
    opts = ap.parse_args()
    repeats = opts.repeats
    mod, have_tiled = build()
    on = M.Online(mod)
    ffi, lib = on.ffi, on.lib
    rng = np.random.default_rng(0)
    rows = [("decode H32/8 D128 KV1058", 1, 32, 8, 128, 1058, 1057, 1, "split"),
            ("decode H32/8 D128 KV4096", 1, 32, 8, 128, 4096, 4095, 1, "split"),
            # the whole-model benchmark's shape (two query heads per KV head) at its n_past
            # 1024 and 128
            ("decode H16/8 D128 KV1025", 1, 16, 8, 128, 1025, 1024, 1, "split"),
            ("decode H16/8 D128 KV129", 1, 16, 8, 128, 129, 128, 1, "split")]
    if have_tiled:
        rows += [("prefill Q64 KV1024 H32/8 D128", 64, 32, 8, 128, 1024, 960, 1, "tiled"),
                 ("full T256 H16 D72 (tiled contract)", 256, 16, 16, 72, 256, 0, 0, "tiled"),
                 # ggml does not tile at D % 16 != 0; the auto contract names that rule,
                 # so this row is the bit-exact comparison with ggml's own choice
                 ("full T256 H16 D72 (auto contract)", 256, 16, 16, 72, 256, 0, 0, "auto")]
    isa = {0: "scalar", 1: "avx2", 2: "avx512"}[int(lib.v8_cpu_best_isa())]
    ggml = GgmlOps()
    contracts = ggml_contracts(lib, ggml.build)
    print(f"# CPU: {cpu_model()}; ours: {isa}")
    print("# load average %.2f %.2f %.2f" % os.getloadavg())
    print(f"{'row':34s} {'thr':>3s} {'ours ms':>9s} {'ggml ms':>9s} {'ratio':>6s} "
          f"{'warm ours':>9s} {'warm ggml':>9s} {'ratio':>6s} "
          f"{'cold ours':>9s} {'cold ggml':>9s} {'ratio':>6s} bit-exact")
    for name, n_q, h, hkv, d, kv, p0, causal, kind in rows:
        if opts.rows not in name:
            continue
        q = rng.standard_normal((n_q, h, d)).astype(np.float32)
        k = rng.standard_normal((hkv, kv, d)).astype(np.float16).view(np.uint16)
        v = rng.standard_normal((hkv, kv, d)).astype(np.float16).view(np.uint16)
        scale = float(np.float32(1 / np.sqrt(d)))
        # llama.cpp's KV extent: the valid keys rounded up to 256, the rest zero and masked
        kv_pad = -(-kv // 256) * 256
        k_pad = np.zeros((hkv, kv_pad, d), np.uint16)
        v_pad = np.zeros((hkv, kv_pad, d), np.uint16)
        k_pad[:, :kv], v_pad[:, :kv] = k, v
        for threads in (1, 2):
            pool = on.pool(threads)
            out = np.empty((n_q, h, d), np.float32)
            contract = contracts[kind]
            if kind == "split":
                fn = lib.v8_attn_online_split_parallel_dispatch
                nbytes = int(lib.v8_attn_online_split_scratch_bytes(n_q, h, d, threads))
            elif kind == "auto":
                fn = lib.v8_attn_auto_parallel_dispatch
                nbytes = int(lib.v8_attn_auto_scratch_bytes(n_q, h, d, threads))
            else:
                fn = lib.v8_attn_tiled_parallel_dispatch
                nbytes = int(lib.v8_attn_tiled_scratch_bytes(n_q, h, d, threads))
            scratch = ffi.new("char[]", max(nbytes, 1))
            status = [0]
            ours_on = partial(OursCall, ffi, fn, status,
                              (pool, contract, ffi.cast("float *", out.ctypes.data),
                               ffi.cast("float *", q.ctypes.data)),
                              (n_q, h, hkv, d, kv, kv, p0, causal, 0, scale, scratch, nbytes))

            new_graph = partial(ggml.flash_attn_graph, q, k_pad, v_pad, kv, p0, bool(causal),
                                scale, threads)
            with new_graph() as gg:
                t_ours, t_gg, w_ours, w_gg = interleaved_medians(ours_on(k, v), gg.compute, repeats)
                ref = gg.output()
            exact = status[0] == 0 and np.array_equal(out.view(np.uint32), ref.view(np.uint32))
            cold = f"{'-':>9s} {'-':>9s} {'-':>6s}"
            if kind == "split":
                c_ours, c_gg, exact_cold = cold_row(new_graph, ours_on, k, v, repeats, out, ref)
                exact = exact and exact_cold and status[0] == 0
                cold = f"{c_ours * 1e3:9.3f} {c_gg * 1e3:9.3f} {c_ours / c_gg:6.2f}"
            print(f"{name:34s} {threads:3d} {t_ours * 1e3:9.3f} {t_gg * 1e3:9.3f} "
                  f"{t_ours / t_gg:6.2f} {w_ours * 1e3:9.3f} {w_gg * 1e3:9.3f} "
                  f"{w_ours / w_gg:6.2f} {cold} {exact}")
    print("# load average %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
