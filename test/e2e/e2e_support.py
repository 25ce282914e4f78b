"""Stitched end-to-end support: tiny GGUF decoders with real K-quant weights, the v8 program
built from them, and an independent numpy decoder of the same contracts.

The numpy decoder is written per family from the family's published architecture (norm
placement, QK-norm, biases, RoPE pairing, activation, embedding scale, tying), not from the
circuit or the built IR, so a wrong graph shows up as a parity failure.  Each op is one of
the existing independent models: ops_models (RMSNorm/QK-norm, fp32 linear, RoPE, residual,
SwiGLU/GeGLU), online_model (f16 single range and split-KV attention), tiled_model (the tiled
prefill part of the auto contract) and quant_model (K-quant linears over Q8_K).
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
for _dir in ("runtime_c/attention", "runtime_c/ops", "runtime_c/quant"):
    _p = str(HERE.parent / _dir)
    if _p not in sys.path:
        sys.path.insert(0, _p)

import online_model as OM  # noqa: E402
import ops_models as OPS  # noqa: E402
import quant_model as QM  # noqa: E402
import tiled_model as TM  # noqa: E402

F32 = np.float32
E, H, HKV, D, FFN, VOCAB = 256, 4, 2, 64, 512, 512
PREFILL_TOKENS, DECODE_STEPS, KV_CAPACITY = 20, 8, 1024
Q_TILE_THRESHOLD = 64  # f16_flash_auto_qtile64: the tiled part from 64 query rows on


# ---- families ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    circuit: str
    arch: str
    layers: int
    rope_base: float
    eps: float
    neox: bool = True
    qk_norm: bool = False
    qkv_bias: bool = False
    post_norms: bool = False
    geglu: bool = False
    embed_scale: bool = False
    tied: bool = True
    output_type: str = "q6_k"  # when untied
    local_base: float | None = None  # sliding-window layers' RoPE base
    pattern: int | None = None  # every `pattern`-th layer is global
    extra_metadata: dict[str, Any] = field(default_factory=dict[str, Any])

    def is_global(self, layer: int) -> bool:
        return self.pattern is None or (layer + 1) % self.pattern == 0

    def base(self, layer: int) -> float:
        if self.local_base is not None and not self.is_global(layer):
            return self.local_base
        return self.rope_base


FAMILIES = {
    "qwen3": Family("qwen3", "qwen3", 2, 1e6, 1e-6, qk_norm=True),
    "qwen2": Family("qwen2", "qwen2", 2, 1e6, 1e-6, qkv_bias=True, tied=False,
                    output_type="q6_k"),
    "nanbeige": Family("nanbeige", "llama", 2, 1e4, 1e-5, neox=False, tied=False,
                       output_type="q4_k"),
    # 3 layers with a period of 3: two sliding-window (local base) layers, then a global one.
    # The window equals the KV capacity, so it masks nothing (the builder refuses otherwise).
    "gemma3": Family("gemma3", "gemma3", 3, 1e6, 1e-6, qk_norm=True, post_norms=True,
                     geglu=True, embed_scale=True, local_base=1e4, pattern=3,
                     extra_metadata={"attention.sliding_window": KV_CAPACITY,
                                     "attention.sliding_window_pattern": 3,
                                     "rope.freq_base_swa": 1e4}),
}


def tensor_types(fam: Family, layer: int) -> dict[str, str]:
    """A Q4_K_M-like mix; layer 1 keeps two projections in fp32 so all three linear
    contracts meet in one model."""
    types = {"attn_q": "q4_k", "attn_k": "q4_k", "attn_v": "q6_k", "attn_output": "q4_k",
             "ffn_gate": "q4_k", "ffn_up": "q4_k", "ffn_down": "q6_k"}
    if layer == 1:
        types["attn_k"] = "f32"
        types["ffn_up"] = "f32"
    return types


# ---- weights and the GGUF file -------------------------------------------------------------


def ggml_quantize(fmt: str, w: np.ndarray) -> np.ndarray:
    """Real K-quant blocks from ggml_quantize_chunk (the format's own producer)."""
    import ggml

    qtype = {"q4_k": ggml.GGML_TYPE_Q4_K, "q6_k": ggml.GGML_TYPE_Q6_K}[fmt]
    n, k = w.shape
    per = {"q4_k": QM.Q4_K_BYTES, "q6_k": QM.Q6_K_BYTES}[fmt]
    out = np.zeros((n, k // 256 * per), np.uint8)
    src = np.ascontiguousarray(w, F32)
    written = ggml.ggml_quantize_chunk(qtype, src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                       out.ctypes.data, 0, n, k, None)
    assert written == out.nbytes
    return out


def synthetic_weights(fam: Family, seed: int) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (type, fp32 values).  Projections ~ N(0, 1/K) with per-row magnitudes over a
    decade, norm weights near 1, biases ~ N(0, 0.5^2), embeddings ~ N(0, 1)."""
    rng = np.random.default_rng(seed)

    def proj(n: int, k: int) -> np.ndarray:
        rows = 10.0 ** rng.uniform(-0.5, 0.5, size=(n, 1))
        return (rng.standard_normal((n, k)) * rows / np.sqrt(k)).astype(F32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(F32)

    out: dict[str, tuple[str, np.ndarray]] = {
        "token_embd.weight": ("f32", rng.standard_normal((VOCAB, E)).astype(F32)),
        "output_norm.weight": ("f32", norm(E)),
    }
    if not fam.tied:
        out["output.weight"] = (fam.output_type, proj(VOCAB, E))
    shapes = {"attn_q": (H * D, E), "attn_k": (HKV * D, E), "attn_v": (HKV * D, E),
              "attn_output": (E, H * D), "ffn_gate": (FFN, E), "ffn_up": (FFN, E),
              "ffn_down": (E, FFN)}
    for i in range(fam.layers):
        p = f"blk.{i}."
        types = tensor_types(fam, i)
        out[p + "attn_norm.weight"] = ("f32", norm(E))
        out[p + "ffn_norm.weight"] = ("f32", norm(E))
        for stem, (n, k) in shapes.items():
            out[p + stem + ".weight"] = (types[stem], proj(n, k))
        if fam.qk_norm:
            out[p + "attn_q_norm.weight"] = ("f32", norm(D))
            out[p + "attn_k_norm.weight"] = ("f32", norm(D))
        if fam.qkv_bias:
            for stem, n in (("attn_q", H * D), ("attn_k", HKV * D), ("attn_v", HKV * D)):
                out[p + stem + ".bias"] = ("f32", (0.5 * rng.standard_normal(n)).astype(F32))
        if fam.post_norms:
            out[p + "post_attention_norm.weight"] = ("f32", norm(E))
            out[p + "post_ffw_norm.weight"] = ("f32", norm(E))
    return out


def write_gguf(fam: Family, path: Path, seed: int = 0) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), fam.arch)
    a = fam.arch
    ints = {"block_count": fam.layers, "context_length": 4096, "embedding_length": E,
            "feed_forward_length": FFN, "attention.head_count": H,
            "attention.head_count_kv": HKV, "attention.key_length": D,
            "attention.value_length": D, "vocab_size": VOCAB}
    for key, value in ints.items():
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", fam.eps)
    writer.add_float32(f"{a}.rope.freq_base", fam.rope_base)
    for key, value in fam.extra_metadata.items():
        if isinstance(value, float):
            writer.add_float32(f"{a}.{key}", value)
        else:
            writer.add_uint32(f"{a}.{key}", value)
    qtypes = {"q4_k": gguf.GGMLQuantizationType.Q4_K, "q6_k": gguf.GGMLQuantizationType.Q6_K}
    for name, (kind, values) in synthetic_weights(fam, seed).items():
        if kind == "f32":
            writer.add_tensor(name, values)
        else:
            writer.add_tensor(name, ggml_quantize(kind, values), raw_dtype=qtypes[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def read_gguf(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (type, array as stored: fp32 [rows, cols] or raw blocks uint8 [rows, bytes])."""
    import gguf

    names = {gguf.GGMLQuantizationType.F32: "f32", gguf.GGMLQuantizationType.Q4_K: "q4_k",
             gguf.GGMLQuantizationType.Q6_K: "q6_k"}
    out: dict[str, tuple[str, np.ndarray]] = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        kind = names[t.tensor_type]
        data = np.array(t.data)  # a private copy: the reader's memory map closes with it
        out[t.name] = (kind, np.ascontiguousarray(data.astype(F32) if kind == "f32" else data))
    return out


# ---- the v8 program -----------------------------------------------------------------------


@dataclass
class Built:
    program: Any
    module_text: str
    # per phase, per argument: (name, tensor or None, load transforms)
    args: dict[str, list[tuple[str, str | None, dict[str, float]]]]
    renamed: int  # arguments whose name hint another argument already had


def build_program(gguf_path: Path, circuit: str, prefill_tokens: int,
                  kv_capacity: int, out_dir: Path) -> Built:
    """v8-build (its command-line entry) -> GraphIR text -> build() -> Program."""
    from xdsl.dialects.builtin import FloatAttr, StringAttr
    from xdsl.dialects.func import FuncOp

    from v8dialect.program import build, parse
    from v8dialect.builder import main

    out = out_dir / f"{circuit}_{prefill_tokens}.mlir"
    rc = main([str(gguf_path), "--circuit", circuit, "--prefill-tokens", str(prefill_tokens),
               "--kv-capacity", str(kv_capacity), "-o", str(out)])
    assert rc == 0, f"v8-build exited {rc}"
    text = out.read_text()
    module = parse(text, str(out))
    args: dict[str, list[tuple[str, str | None, dict[str, float]]]] = {}
    renamed = 0
    for fn in module.ops:
        if not isinstance(fn, FuncOp):
            continue
        seen: set[str] = set()
        rows = []
        attrs = fn.arg_attrs.data if fn.arg_attrs is not None else [None] * len(fn.args)
        for arg, attr in zip(fn.body.block.args, attrs, strict=True):
            name = arg.name_hint or f"arg{arg.index}"
            entries = attr.data if attr is not None else {}
            tensor = entries.get("v8.tensor")
            transforms = {k.removeprefix("v8."): v.value.data for k, v in entries.items()
                          if isinstance(v, FloatAttr) and k.startswith("v8.weight_")}
            if name in seen:
                # Two arguments for one tensor under different load transforms carry the
                # same name hint, and Program.run keys inputs by name: give the second a
                # distinct name so each receives its own array.
                name = f"{name}.{'.'.join(sorted(transforms)) or 'as_stored'}"
                arg.name_hint = name
                renamed += 1
            seen.add(name)
            rows.append((name, tensor.data if isinstance(tensor, StringAttr) else None,
                         transforms))
        args[fn.sym_name.data] = rows
    program = build(module, name=f"v8_e2e_{circuit}_{prefill_tokens}")
    for phase, rows in args.items():
        assert [b.name for b in program.phases[phase].inputs] == [r[0] for r in rows], phase
    return Built(program, text, args, renamed)


def load_transformed(values: np.ndarray, transforms: dict[str, float]) -> np.ndarray:
    """Apply the argument's load transforms in fp32: (w + offset), then w * scale."""
    out = values
    if "weight_offset" in transforms:
        out = (out + F32(transforms["weight_offset"])).astype(F32)
    if "weight_scale" in transforms:
        out = (out * F32(transforms["weight_scale"])).astype(F32)
    return np.ascontiguousarray(out)


class ProgramRunner:
    """Feeds a Program its weights (once, transformed as the IR says) and its KV caches
    (the same arrays across phases: the program writes them in place)."""

    def __init__(self, built: Built, weights: dict[str, tuple[str, np.ndarray]]) -> None:
        self.built = built
        self.program = built.program
        self.weights: dict[str, dict[str, np.ndarray]] = {}
        for phase, rows in built.args.items():
            self.weights[phase] = {name: load_transformed(weights[tensor][1], tf)
                                   for name, tensor, tf in rows if tensor is not None}
        sig = self.program.phases["decode"]
        self.cache_shapes = {b.name: b.shape for b in sig.inputs if b.name.endswith("_cache")}
        self.reset()

    def reset(self) -> None:
        self.caches = {n: np.zeros(s, np.uint16) for n, s in self.cache_shapes.items()}

    def run(self, phase: str, tokens: np.ndarray, n_past: int, workers: int) -> np.ndarray:
        t = len(tokens)
        (logits,) = self.program.run(
            phase, n_past=n_past, workers=workers, tokens=np.asarray(tokens, np.int32),
            positions=np.arange(n_past, n_past + t, dtype=np.int32),
            **self.caches, **self.weights[phase])
        return logits


# ---- the independent numpy decoder ------------------------------------------------------------


def cpu_has_avx512fp16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_fp16" in flags


def attention_tree(program: Any) -> str:
    """The f16 dot-product lane tree the attention providers name for this CPU: fp16 lanes
    when AVX-512 FP16 is present, else the fp32 tree of the best ISA (scalar runs the
    oracle, which uses the AVX2 tree)."""
    isa = program.extension.lib.v8_cpu_best_isa()
    if isa == 2:
        return OM.TREE_AVX512FP16 if cpu_has_avx512fp16() else OM.TREE_AVX512
    return OM.TREE_AVX2


class NumpyDecoder:
    """The family's decoder under the circuit's contracts, with its own fp16 KV caches."""

    def __init__(self, fam: Family, weights: dict[str, tuple[str, np.ndarray]],
                 capacity: int, tree: str) -> None:
        self.fam, self.w, self.capacity, self.tree = fam, weights, capacity, tree
        self.scale = float(F32(1.0 / math.sqrt(D)))
        table = weights["token_embd.weight"][1]
        # Gemma scales the gathered rows by sqrt(hidden) in fp32.
        self.table = (table * F32(math.sqrt(E))).astype(F32) if fam.embed_scale else table
        self.reset()

    def reset(self) -> None:
        shape = (HKV, self.capacity, D)
        self.k = [np.zeros(shape, np.uint16) for _ in range(self.fam.layers)]
        self.v = [np.zeros(shape, np.uint16) for _ in range(self.fam.layers)]

    def linear(self, name: str, x: np.ndarray, bias: str | None = None) -> np.ndarray:
        kind, w = self.w[name]
        b = self.w[bias][1] if bias is not None and bias in self.w else None
        if kind == "f32":
            return OPS.linear(w, x, b)
        return QM.linear(kind, w, x, b)

    def norm(self, name: str, x: np.ndarray) -> np.ndarray:
        return OPS.rmsnorm(x, self.w[name][1], self.fam.eps)

    def attention(self, layer: int, q: np.ndarray, n_past: int, phase: str, workers: int,
                  decode_single_range: bool) -> np.ndarray:
        t = q.shape[0]
        kc, vc = self.k[layer], self.v[layer]
        kv_len = n_past + t
        if phase == "decode" and not decode_single_range:
            return OM.f16_split_kv(q, kc, vc, H, HKV, kv_len, self.scale, self.tree, workers)
        if t < Q_TILE_THRESHOLD:
            return OM.f16_single_range(q, kc, vc, H, HKV, kv_len, n_past, True, self.scale,
                                       self.tree)
        return TM.tiled_attention(q, kc.view(np.float16), vc.view(np.float16), kv_len, n_past,
                                  True, self.scale, HKV)

    def forward(self, tokens: np.ndarray, n_past: int, phase: str, workers: int = 1,
                decode_single_range: bool = False) -> np.ndarray:
        fam = self.fam
        t = len(tokens)
        pos = np.arange(n_past, n_past + t)
        x = OPS.embedding(self.table, tokens)
        for i in range(fam.layers):
            p = f"blk.{i}."
            h = self.norm(p + "attn_norm.weight", x)
            q = self.linear(p + "attn_q.weight", h, p + "attn_q.bias").reshape(t, H, D)
            k = self.linear(p + "attn_k.weight", h, p + "attn_k.bias").reshape(t, HKV, D)
            v = self.linear(p + "attn_v.weight", h, p + "attn_v.bias").reshape(t, HKV, D)
            if fam.qk_norm:
                q = self.norm(p + "attn_q_norm.weight", q)
                k = self.norm(p + "attn_k_norm.weight", k)
            q = OPS.rope(q, pos, D, fam.base(i), fam.neox)
            k = OPS.rope(k, pos, D, fam.base(i), fam.neox)
            # kv_store_f16_round_nearest_even: rows into [Hkv][capacity][D] at n_past..
            self.k[i][:, n_past:n_past + t] = k.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
            self.v[i][:, n_past:n_past + t] = v.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
            att = self.attention(i, q, n_past, phase, workers, decode_single_range)
            o = self.linear(p + "attn_output.weight", att.reshape(t, H * D))
            if fam.post_norms:
                o = self.norm(p + "post_attention_norm.weight", o)
            x = OPS.residual_add(o, x)
            h2 = self.norm(p + "ffn_norm.weight", x)
            g = self.linear(p + "ffn_gate.weight", h2)
            u = self.linear(p + "ffn_up.weight", h2)
            act = OPS.geglu(g, u) if fam.geglu else OPS.swiglu(g, u)
            down = self.linear(p + "ffn_down.weight", act)
            if fam.post_norms:
                down = self.norm(p + "post_ffw_norm.weight", down)
            x = OPS.residual_add(down, x)
        final = self.norm("output_norm.weight", x)
        return self.linear("token_embd.weight" if fam.tied else "output.weight", final)


# ---- comparison --------------------------------------------------------------------------------


def same_bits(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(np.ascontiguousarray(a, F32).view(np.uint32)
                                == np.ascontiguousarray(b, F32).view(np.uint32)))


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
