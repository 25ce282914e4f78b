"""Single ops of the ggml that llama.cpp ships (llama-cpp-python's own libggml), called through
ctypes: per-op evidence from the same build of ggml whose arithmetic the end-to-end oracle runs.

    with GgmlOps() as g:
        y = g.mul_mat(w_blocks, "q4_k", x, threads=2)      # [M, N] = x[M, K] . w[N, K]^T
        y = g.swiglu(gate, up, threads=1)

Numpy arrays are row-major [rows, cols]; a ggml tensor with ne = (cols, rows).  The op runs
on a fresh context with `ggml_graph_compute_with_ctx`, the CPU backend's own kernels and
thread split (no scheduler, no repacked weights).  `mul_mat_repacked` instead places the
weight in the CPU backend's repack buffer type ("CPU_REPACK", as llama.cpp's model loader does
by default) and runs the graph on a CPU backend, so the weight's repacked GEMV/GEMM kernels run.
The libraries and their signatures are `ggml_lib`'s.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Self

import numpy as np

from v8dialect.parity import ggml_lib
from v8dialect.parity.ggml_lib import TYPES, InitParams, row_bytes
from v8dialect.parity.llamacpp import GgmlTensor
from v8dialect.runtime.host import HostError


def _leftover_sums(w: np.ndarray[Any, Any], x: np.ndarray[Any, Any], block: int) -> np.ndarray[Any, Any]:
    """Each row's dot with x as a leftover loop whose products are rounded up to the last
    K % block elements and fused after (fmaf: one rounding), in fp32 from +0."""
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    k = x.shape[0]
    rounded = k - k % block
    out = np.zeros(w.shape[0], np.float32)
    for r in range(w.shape[0]):
        s = np.float32(0.0)
        for i in range(k):
            if i < rounded:
                s = np.float32(s + np.float32(w[r, i] * x[i]))
            else:
                s = np.float32(libm.fmaf(float(w[r, i]), float(x[i]), float(s)))
        out[r] = s
    return out


class _TensorExtra(ctypes.Structure):
    """struct ggml_tensor up to its `extra` pointer (set by the repack buffer's init_tensor
    to the weight's repack traits, or left NULL when the type/shape is not repacked)."""

    _fields_ = [("head", GgmlTensor), ("extra", ctypes.c_void_p)]


def flash_inputs(q: np.ndarray[Any, Any], k16: np.ndarray[Any, Any], v16: np.ndarray[Any, Any],
                 kv_len: int, q_pos0: int, causal: bool, pad: int,
                 window: int) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """(ggml type, values in reverse ggml axis order) of flash attention's q, k, v and mask as
    llama.cpp lays them out (see GgmlOps.flash_attn_ext)."""
    n_q = q.shape[0]
    n_kv = min(-(-kv_len // pad) * pad, k16.shape[1])
    mask = np.full((n_q, n_kv), -np.inf, np.float16)
    for i in range(n_q):
        mask[i, :q_pos0 + i + 1 if causal else kv_len] = 0
        if window:
            mask[i, :max(0, q_pos0 + i + 1 - window)] = -np.inf
    return [("f32", np.ascontiguousarray(q.transpose(1, 0, 2), np.float32)),
            ("f16", np.ascontiguousarray(k16[:, :n_kv]).view(np.uint16)),
            ("f16", np.ascontiguousarray(v16[:, :n_kv]).view(np.uint16)),
            ("f16", mask.view(np.uint16))]


class GgmlOps:
    def __init__(self, mem_bytes: int = 1 << 28) -> None:
        self.base, self.cpu = ggml_lib.load_libraries()
        self.mem_bytes = mem_bytes

    @property
    def build(self) -> str:
        """The x86 build class of this libggml-cpu (the `ggml_build` manifest values): the
        contracts of llama.cpp's arithmetic that name a build are checked only against it."""
        if self.cpu.ggml_cpu_has_avx512():
            return "avx512"
        if self.cpu.ggml_cpu_has_avx2():
            return "avx2"
        return "other"

    def loop_vectors(self) -> str:
        """This libggml's `ggml_loop_vectors` form (v8dialect/runtime/host.py): how its compiler
        vectorized ggml_vec_dot_f32's leftover loop, read off one f32 mul_mat whose dots are
        all leftovers (K = 13, below one vector step; M = 1 takes vec_dot): 8 products rounded
        and 5 fused (min_8_lanes), or 12 and 1 (min_4_lanes)."""
        rng = np.random.default_rng(13)
        w = rng.standard_normal((64, 13)).astype(np.float32)
        x = rng.standard_normal((1, 13)).astype(np.float32)
        got = self.mul_mat(w, "f32", x, 13)[0].view(np.uint32)
        forms = [form for form, block in (("min_8_lanes", 8), ("min_4_lanes", 4))
                 if np.array_equal(got, _leftover_sums(w, x[0], block).view(np.uint32))]
        if len(forms) != 1:
            raise HostError("llama.cpp's ggml_vec_dot_f32 leftovers match "
                            f"{'both' if forms else 'neither'} ggml_loop_vectors form; pass "
                            "--set ggml_loop_vectors=min_8_lanes or min_4_lanes")
        return forms[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        del kind, value, tb

    # ---- helpers -----------------------------------------------------------------------------

    def quantize(self, dtype: str, w: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """ggml's own quantizer: fp32 [rows, cols] -> raw blocks uint8 [rows, row bytes]."""
        rows, cols = w.shape
        src = np.ascontiguousarray(w, np.float32)
        out = np.zeros((rows, row_bytes(dtype, cols)), np.uint8)
        written = self.base.ggml_quantize_chunk(TYPES[dtype], src.ctypes.data, out.ctypes.data,
                                                0, rows, cols, None)
        if written != out.nbytes:
            raise ValueError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.nbytes}")
        return out

    def _tensor(self, ctx: int, dtype: str, cols: int, rows: int,
                data: np.ndarray[Any, Any] | None) -> int:
        t = self.base.ggml_new_tensor_2d(ctx, TYPES[dtype], cols, rows)
        if data is not None:
            raw = np.ascontiguousarray(data)
            if raw.nbytes != rows * row_bytes(dtype, cols):
                raise ValueError(f"{dtype}[{rows}x{cols}] needs {rows * row_bytes(dtype, cols)} "
                                 f"bytes, got {raw.nbytes}")
            ctypes.memmove(GgmlTensor.from_address(t).data, raw.ctypes.data, raw.nbytes)
        return t

    def _compute(self, ctx: int, out: int, threads: int, rows: int, cols: int) -> np.ndarray[Any, Any]:
        graph = self.base.ggml_new_graph(ctx)
        self.base.ggml_build_forward_expand(graph, out)
        status = self.cpu.ggml_graph_compute_with_ctx(ctx, graph, threads)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute_with_ctx failed with status {status}")
        data = GgmlTensor.from_address(out).data
        buf = (ctypes.c_float * (rows * cols)).from_address(data)
        return np.array(np.ctypeslib.as_array(buf).reshape(rows, cols), np.float32)

    def _run(self, build: Any, threads: int, rows: int, cols: int) -> np.ndarray[Any, Any]:
        ctx = self.base.ggml_init(InitParams(self.mem_bytes, None, False))
        if not ctx:
            raise MemoryError("ggml_init failed")
        try:
            return self._compute(ctx, build(ctx), threads, rows, cols)
        finally:
            self.base.ggml_free(ctx)

    # ---- ops -----------------------------------------------------------------------------------

    def mul_mat(self, w: np.ndarray[Any, Any], dtype: str, x: np.ndarray[Any, Any], cols: int,
                threads: int = 1) -> np.ndarray[Any, Any]:
        """y[M, N] = x[M, K] . W[N, K]^T with W stored as `dtype` (raw blocks or values)."""
        n, m = w.shape[0], x.shape[0]

        def build(ctx: int) -> int:
            wt = self._tensor(ctx, dtype, cols, n, w)
            xt = self._tensor(ctx, "f32", cols, m, np.ascontiguousarray(x, np.float32))
            return self.base.ggml_mul_mat(ctx, wt, xt)

        return self._run(build, threads, m, n)

    def scale(self, x: np.ndarray[Any, Any], factor: float, threads: int = 1) -> np.ndarray[Any, Any]:
        """ggml_scale of an fp32 [rows, cols] tensor by `factor` (no bias)."""
        rows, cols = x.shape

        def build(ctx: int) -> int:
            xt = self._tensor(ctx, "f32", cols, rows, np.ascontiguousarray(x, np.float32))
            return self.base.ggml_scale(ctx, xt, factor)

        return self._run(build, threads, rows, cols)

    def get_rows(self, table: np.ndarray[Any, Any], dtype: str, ids: np.ndarray[Any, Any],
                 cols: int, threads: int = 1, scale: float | None = None) -> np.ndarray[Any, Any]:
        """fp32 rows [T, cols] of `table` (raw blocks or values stored as `dtype`) at int32
        ids [T]: ggml_get_rows, llama.cpp's token embedding lookup (a row dequantized by the
        type's to_float); with `scale`, then ggml_scale by that fp32 value (Gemma's
        sqrtf(n_embd) on the gathered rows)."""
        n, t = table.shape[0], ids.shape[0]

        def build(ctx: int) -> int:
            wt = self._tensor(ctx, dtype, cols, n, table)
            i32 = np.ascontiguousarray(ids, np.int32)
            it = self.base.ggml_new_tensor_1d(ctx, 26, t)  # GGML_TYPE_I32
            ctypes.memmove(GgmlTensor.from_address(it).data, i32.ctypes.data, i32.nbytes)
            rows = self.base.ggml_get_rows(ctx, wt, it)
            return rows if scale is None else self.base.ggml_scale(ctx, rows, scale)

        return self._run(build, threads, t, cols)

    def mul_mat_repacked(self, w: np.ndarray[Any, Any], dtype: str, x: np.ndarray[Any, Any],
                         cols: int, threads: int = 1) -> tuple[np.ndarray[Any, Any], bool]:
        """y[M, N] = x[M, K] . W[N, K]^T with W (raw blocks) set into a CPU_REPACK buffer, the
        graph run by a CPU backend with `threads` threads.  Returns (y, repacked): repacked is
        False when the repack buffer kept the weight plain (no repack traits for this type and
        row count on this CPU), in which case y came from the ordinary mul_mat."""
        with self.repacked_mul_mat(w, dtype, x, cols, threads) as graph:
            graph.compute()
            return graph.output(), graph.repacked

    def repacked_mul_mat(self, w: np.ndarray[Any, Any], dtype: str, x: np.ndarray[Any, Any],
                         cols: int, threads: int = 1) -> RepackedMulMat:
        """mul_mat_repacked's graph, built once and kept (a context manager): compute() runs
        it again, as a benchmark times it, and output() reads y."""
        n = w.shape[0]
        raw = np.ascontiguousarray(w)
        if raw.nbytes != n * row_bytes(dtype, cols):
            raise ValueError(f"{dtype}[{n}x{cols}] needs {n * row_bytes(dtype, cols)} bytes, "
                             f"got {raw.nbytes}")
        return RepackedMulMat(self, raw, dtype, np.ascontiguousarray(x, np.float32), cols, threads)

    def metadata_context(self, stack: ExitStack) -> int:
        """A context for tensor metadata only (buffers hold the data), freed with the stack."""
        ctx = self.base.ggml_init(InitParams(1 << 20, None, True))
        if not ctx:
            raise MemoryError("ggml_init failed")
        stack.callback(self.base.ggml_free, ctx)
        return ctx

    def tensor_buffer(self, stack: ExitStack, ctx: int, buffer_type: int, what: str) -> int:
        buf = self.base.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buffer_type)
        if not buf:
            raise MemoryError(f"{what} buffer allocation failed")
        stack.callback(self.base.ggml_backend_buffer_free, buf)
        return buf

    def repacked_weight(self, stack: ExitStack, dtype: str, cols: int,
                         raw: np.ndarray[Any, Any]) -> tuple[int, bool]:
        """The weight in a CPU_REPACK buffer: (tensor, whether the buffer repacked it)."""
        base = self.base
        ctx = self.metadata_context(stack)
        wt = base.ggml_new_tensor_2d(ctx, TYPES[dtype], cols, raw.shape[0])
        buf = self.tensor_buffer(stack, ctx, self.cpu._Z35ggml_backend_cpu_repack_buffer_typev(), "CPU_REPACK")
        if base.ggml_backend_buffer_name(buf) != b"CPU_REPACK":
            raise RuntimeError("the weight buffer is not the CPU_REPACK buffer type")
        repacked = bool(_TensorExtra.from_address(wt).extra)
        if repacked:
            base.ggml_backend_tensor_set(wt, raw.ctypes.data, 0, raw.nbytes)  # repacks
        else:
            ctypes.memmove(GgmlTensor.from_address(wt).data, raw.ctypes.data, raw.nbytes)
        return wt, repacked

    def _glu(self, fn: Any, gate: np.ndarray[Any, Any], up: np.ndarray[Any, Any],
             threads: int) -> np.ndarray[Any, Any]:
        rows, cols = gate.shape

        def build(ctx: int) -> int:
            g = self._tensor(ctx, "f32", cols, rows, np.ascontiguousarray(gate, np.float32))
            u = self._tensor(ctx, "f32", cols, rows, np.ascontiguousarray(up, np.float32))
            return fn(ctx, g, u)

        return self._run(build, threads, rows, cols)

    def swiglu(self, gate: np.ndarray[Any, Any], up: np.ndarray[Any, Any],
               threads: int = 1) -> np.ndarray[Any, Any]:
        """silu(gate) * up, as llama.cpp's FFN computes it (ggml_swiglu_split)."""
        return self._glu(self.base.ggml_swiglu_split, gate, up, threads)

    def geglu(self, gate: np.ndarray[Any, Any], up: np.ndarray[Any, Any],
              threads: int = 1) -> np.ndarray[Any, Any]:
        """gelu(gate) * up (ggml_geglu_split)."""
        return self._glu(self.base.ggml_geglu_split, gate, up, threads)

    def rope(self, x: np.ndarray[Any, Any], pos: np.ndarray[Any, Any], n_rot: int, freq_base: float,
             mode: str, sections: tuple[int, int, int, int] | None = None,
             threads: int = 1) -> np.ndarray[Any, Any]:
        """RoPE of x[T, H, D] at positions pos[T] (or [4][T] with sections), mode 'neox',
        'normal' or 'imrope'; plain frequencies (freq_scale 1, no YaRN, attn_factor 1)."""
        t, h, d = x.shape
        modes = {"normal": 0, "neox": 2, "imrope": 40}

        def build(ctx: int) -> int:
            xt = self.base.ggml_new_tensor_3d(ctx, TYPES["f32"], d, h, t)
            ctypes.memmove(GgmlTensor.from_address(xt).data,
                           np.ascontiguousarray(x, np.float32).ctypes.data, x.size * 4)
            p32 = np.ascontiguousarray(pos, np.int32).reshape(-1)
            pt = self.base.ggml_new_tensor_1d(ctx, 26, p32.size)  # GGML_TYPE_I32
            ctypes.memmove(GgmlTensor.from_address(pt).data, p32.ctypes.data, p32.nbytes)
            args = (0, 1.0, 0.0, 1.0, 32.0, 1.0)  # n_ctx_orig, freq_scale, ext, attn, beta_fast, beta_slow
            if sections is None:
                return self.base.ggml_rope_ext(ctx, xt, pt, None, n_rot, modes[mode], args[0],
                                               freq_base, *args[1:])
            secs = (ctypes.c_int * 4)(*sections)
            return self.base.ggml_rope_multi(ctx, xt, pt, None, n_rot, secs, modes[mode], args[0],
                                             freq_base, *args[1:])

        return self._run(build, threads, t, h * d).reshape(t, h, d)

    def _fill(self, ctx: int, dtype: str, values: np.ndarray[Any, Any]) -> int:
        """A new tensor of `dtype` holding `values` (numpy axes in reverse ggml order)."""
        dims = list(values.shape[::-1]) + [1] * (3 - values.ndim)
        t = self.base.ggml_new_tensor_3d(ctx, TYPES[dtype], *dims[:3])
        raw = np.ascontiguousarray(values)
        ctypes.memmove(GgmlTensor.from_address(t).data, raw.ctypes.data, raw.nbytes)
        return t

    def flash_attn_ext(self, q: np.ndarray[Any, Any], k16: np.ndarray[Any, Any],
                       v16: np.ndarray[Any, Any], kv_len: int, q_pos0: int, causal: bool,
                       scale: float, threads: int = 1, pad: int = 256,
                       window: int = 0) -> np.ndarray[Any, Any]:
        """Flash attention as llama.cpp calls it: q fp32 [T, H, D], fp16 caches [Hkv, cap, D]
        seen over the valid length rounded up to `pad` (llama.cpp's KV extent), an fp16 mask
        hiding the padding (and the future when causal), fp32 precision.  [T, H, D] out.
        window > 0 adds llama.cpp's standard SWA mask: the query at p hides key p0 when
        p - p0 >= window (llama_hparams::is_masked_swa)."""
        inputs = flash_inputs(q, k16, v16, kv_len, q_pos0, causal, pad, window)

        def build(ctx: int) -> int:
            tensors = [self._fill(ctx, dtype, values) for dtype, values in inputs]
            return self.flash_node(ctx, tensors, scale)

        n_q, n_head, d = q.shape
        return self._run(build, threads, n_q, n_head * d).reshape(n_q, n_head, d)

    def flash_node(self, ctx: int, tensors: list[int], scale: float) -> int:
        """The flash_attn_ext node over q, k, v, mask tensors of `ctx`, fp32 precision."""
        tq, tk, tv, tm = tensors
        out = self.base.ggml_flash_attn_ext(ctx, tq, tk, tv, tm, scale, 0.0, 0.0)
        self.base.ggml_flash_attn_ext_set_prec(out, 10)  # GGML_PREC_F32
        return out

    def flash_attn_graph(self, q: np.ndarray[Any, Any], k16: np.ndarray[Any, Any],
                         v16: np.ndarray[Any, Any], kv_len: int, q_pos0: int, causal: bool,
                         scale: float, threads: int = 1, pad: int = 256) -> FlashAttnGraph:
        """flash_attn_ext's graph on a CPU backend with `threads` threads, built once and kept
        (a context manager): compute() runs it again, as a benchmark times it; output() reads
        [T, H, D]."""
        return FlashAttnGraph(self, flash_inputs(q, k16, v16, kv_len, q_pos0, causal, pad, 0),
                              q.shape, scale, threads)

    def gelu_table(self) -> np.ndarray[Any, Any]:
        """The CPU backend's fp16 GELU table (65536 fp16 bit patterns, indexed by x's fp16 bits)."""
        table = (ctypes.c_uint16 * 65536).in_dll(self.cpu, "ggml_table_gelu_f16")
        return np.array(np.ctypeslib.as_array(table), np.uint16)

    # ---- the Qwen3.5 recurrent layer -------------------------------------------------------

    def gated_delta_chain(self, qkv: np.ndarray[Any, Any], z: np.ndarray[Any, Any],
                          alpha: np.ndarray[Any, Any], beta: np.ndarray[Any, Any],
                          conv_w: np.ndarray[Any, Any], ssm_a: np.ndarray[Any, Any],
                          dt_bias: np.ndarray[Any, Any], norm_w: np.ndarray[Any, Any],
                          conv_state: np.ndarray[Any, Any], ssm_state: np.ndarray[Any, Any],
                          n_k_heads: int, eps: float, threads: int = 1) -> dict[str, np.ndarray[Any, Any]]:
        """llama.cpp's Qwen3.5 linear-attention layer after its projections, one sequence, built
        from the ggml ops src/models/qwen35.cpp uses (fused GATED_DELTA_NET, K = 1): concat of
        conv_state [C, K-1] and qkv [T, C] transposed, SSM_CONV with conv_w [C, K], SILU, q/k/v
        views, l2 norm as RMS_NORM(eps / D) then SCALE(1 / sqrtf(D)), SIGMOID(beta [T, Hv]),
        SOFTPLUS(alpha + dt_bias) * ssm_a, GATED_DELTA_NET on ssm_state [Hv, D, D], RMS_NORM(eps)
        * norm_w times SILU(z [T, Hv*D]).  Returns the stages by llama.cpp's names plus
        "y" [T, Hv*D], "conv_state" [C, K-1] and "ssm_state" [Hv, D, D] after the last token."""
        t_len, channels = qkv.shape
        kernel = conv_w.shape[1]
        n_v_heads, d = ssm_state.shape[0], ssm_state.shape[1]
        kd = n_k_heads * d
        f4 = 4
        b = self.base
        f32 = np.float32
        eps_l2 = float(f32(eps) / f32(d))
        inv_sqrt = float(f32(1.0) / np.sqrt(f32(d)))

        def new(ctx: int, values: np.ndarray[Any, Any], ne: tuple[int, ...]) -> int:
            ne4 = tuple(ne) + (1,) * (4 - len(ne))
            t = b.ggml_new_tensor_4d(ctx, TYPES["f32"], *ne4)
            raw = np.ascontiguousarray(values, np.float32)
            if raw.size != int(np.prod(ne4)):
                raise ValueError(f"{raw.shape} does not fill ggml ne {ne4}")
            ctypes.memmove(GgmlTensor.from_address(t).data, raw.ctypes.data, raw.nbytes)
            return t

        ctx = b.ggml_init(InitParams(self.mem_bytes, None, False))
        if not ctx:
            raise MemoryError("ggml_init failed")
        try:
            t_qkv = new(ctx, qkv, (channels, t_len, 1))
            t_cs = new(ctx, conv_state, (kernel - 1, channels, 1))
            conv_input = b.ggml_concat(ctx, t_cs, b.ggml_transpose(ctx, t_qkv), 0)
            conv_raw = b.ggml_ssm_conv(ctx, conv_input, new(ctx, conv_w, (kernel, channels)))
            conv_silu = b.ggml_silu(ctx, conv_raw)
            row = channels * f4

            def view(ne0: int, ne1: int, offset: int) -> int:
                return b.ggml_view_4d(ctx, conv_silu, ne0, ne1, t_len, 1, ne0 * f4, row,
                                      row * t_len, offset)

            def l2(x: int) -> int:
                return b.ggml_scale(ctx, b.ggml_rms_norm(ctx, x, eps_l2), inv_sqrt)

            q = l2(view(d, n_k_heads, 0))
            k = l2(view(d, n_k_heads, kd * f4))
            v = view(d, n_v_heads, 2 * kd * f4)
            beta_s = b.ggml_sigmoid(ctx, new(ctx, beta, (1, n_v_heads, t_len, 1)))
            biased = b.ggml_add(ctx, new(ctx, alpha, (n_v_heads, t_len, 1)),
                                new(ctx, dt_bias, (n_v_heads,)))
            gate = b.ggml_mul(ctx, b.ggml_softplus(ctx, biased), new(ctx, ssm_a, (n_v_heads,)))
            gate4 = b.ggml_reshape_4d(ctx, gate, 1, n_v_heads, t_len, 1)
            state = new(ctx, ssm_state, (d, d, n_v_heads, 1))
            gdn = b.ggml_gated_delta_net(ctx, q, k, v, gate4, beta_s, state, 1)
            attn = b.ggml_view_4d(ctx, gdn, d, n_v_heads, t_len, 1, d * f4, d * n_v_heads * f4,
                                  d * n_v_heads * t_len * f4, 0)
            normed = b.ggml_mul(ctx, b.ggml_rms_norm(ctx, attn, float(eps)), new(ctx, norm_w, (d,)))
            z_silu = b.ggml_silu(ctx, new(ctx, z, (d, n_v_heads, t_len, 1)))
            y = b.ggml_mul(ctx, normed, z_silu)
            graph = b.ggml_new_graph(ctx)
            for node in (conv_silu, q, k, beta_s, gate, y):
                b.ggml_build_forward_expand(graph, node)
            status = self.cpu.ggml_graph_compute_with_ctx(ctx, graph, threads)
            if status != 0:
                raise RuntimeError(f"ggml_graph_compute_with_ctx failed with status {status}")

            def read(t: int, count: int, offset: int = 0) -> np.ndarray[Any, Any]:
                data = GgmlTensor.from_address(t).data + offset * f4
                return np.array(np.ctypeslib.as_array((ctypes.c_float * count).from_address(data)),
                                np.float32)

            n_out = t_len * n_v_heads * d
            conv_in = read(conv_input, channels * (kernel - 1 + t_len)).reshape(channels, -1)
            return {
                "conv_output_raw": read(conv_raw, t_len * channels).reshape(t_len, channels),
                "conv_output_silu": read(conv_silu, t_len * channels).reshape(t_len, channels),
                "q_conv_predelta": read(q, t_len * kd).reshape(t_len, kd),
                "k_conv_predelta": read(k, t_len * kd).reshape(t_len, kd),
                "beta_sigmoid": read(beta_s, t_len * n_v_heads).reshape(t_len, n_v_heads),
                "gate": read(gate, t_len * n_v_heads).reshape(t_len, n_v_heads),
                "attn_output": read(gdn, n_out).reshape(t_len, n_v_heads * d),
                "y": read(y, n_out).reshape(t_len, n_v_heads * d),
                "conv_state": np.ascontiguousarray(conv_in[:, t_len:]),
                "ssm_state": read(gdn, n_v_heads * d * d, n_out).reshape(n_v_heads, d, d),
            }
        finally:
            b.ggml_free(ctx)


class BackendGraph:
    """A graph kept with the CPU backend that computes it (a context manager): subclasses
    build the graph, holding what they allocate on `_stack`, then call `_start`."""

    _base: Any
    _graph: int
    _backend: int
    _stack: ExitStack

    def _start(self, ops: GgmlOps, graph: int, threads: int) -> None:
        self._base, self._graph = ops.base, graph
        self._backend = ops.cpu.ggml_backend_cpu_init()
        if not self._backend:
            raise RuntimeError("ggml_backend_cpu_init failed")
        self._stack.callback(ops.base.ggml_backend_free, self._backend)
        ops.cpu.ggml_backend_cpu_set_n_threads(self._backend, threads)

    def compute(self) -> None:
        status = self._base.ggml_backend_graph_compute(self._backend, self._graph)
        if status != 0:
            raise RuntimeError(f"ggml_backend_graph_compute failed with status {status}")

    def _read(self, tensor: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        res = (ctypes.c_float * int(np.prod(shape))).from_address(GgmlTensor.from_address(tensor).data)
        return np.array(np.ctypeslib.as_array(res).reshape(shape), np.float32)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _graph_of(base: Any, ctx: int, out: int) -> int:
    graph = base.ggml_new_graph(ctx)
    base.ggml_build_forward_expand(graph, out)
    return graph


class RepackedMulMat(BackendGraph):
    """One mul_mat graph over a weight in the CPU_REPACK buffer, with its CPU backend."""

    def __init__(self, ops: GgmlOps, raw: np.ndarray[Any, Any], dtype: str,
                 xs: np.ndarray[Any, Any], cols: int, threads: int) -> None:
        base = ops.base
        self._stack = ExitStack()
        self._rows, self._n = xs.shape[0], raw.shape[0]
        try:
            wt, self.repacked = ops.repacked_weight(self._stack, dtype, cols, raw)
            ctx = ops.metadata_context(self._stack)
            xt = base.ggml_new_tensor_2d(ctx, TYPES["f32"], cols, self._rows)
            self._out = base.ggml_mul_mat(ctx, wt, xt)
            graph = _graph_of(base, ctx, self._out)
            ops.tensor_buffer(self._stack, ctx, base.ggml_backend_cpu_buffer_type(), "CPU")
            base.ggml_backend_tensor_set(xt, xs.ctypes.data, 0, xs.nbytes)
            self._start(ops, graph, threads)
        except BaseException:
            self._stack.close()
            raise

    def output(self) -> np.ndarray[Any, Any]:
        return self._read(self._out, (self._rows, self._n))


class FlashAttnGraph(BackendGraph):
    """One flash-attention graph (GgmlOps.flash_attn_ext's inputs) on a CPU backend."""

    def __init__(self, ops: GgmlOps, inputs: list[tuple[str, np.ndarray[Any, Any]]],
                 shape: tuple[int, ...], scale: float, threads: int) -> None:
        base = ops.base
        self._shape = shape
        self._stack = ExitStack()
        try:
            ctx = ops.metadata_context(self._stack)
            tensors: list[int] = []
            for dtype, values in inputs:
                dims = list(values.shape[::-1]) + [1] * (3 - values.ndim)
                tensors.append(base.ggml_new_tensor_3d(ctx, TYPES[dtype], *dims[:3]))
            self._out = ops.flash_node(ctx, tensors, scale)
            graph = _graph_of(base, ctx, self._out)
            ops.tensor_buffer(self._stack, ctx, base.ggml_backend_cpu_buffer_type(), "CPU")
            for t, (_, values) in zip(tensors, inputs, strict=True):
                raw = np.ascontiguousarray(values)
                base.ggml_backend_tensor_set(t, raw.ctypes.data, 0, raw.nbytes)
            self._start(ops, graph, threads)
        except BaseException:
            self._stack.close()
            raise

    def output(self) -> np.ndarray[Any, Any]:
        return self._read(self._out, self._shape)
