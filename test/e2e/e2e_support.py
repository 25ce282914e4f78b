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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from v8dialect.ir.structure import is_entry_point

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
GEMMA3_WINDOW = 12  # the test Gemma3's sliding window, shorter than its runs
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
    query_scale: bool = False  # Q scaled by 1/sqrt(D) before attention, which runs unscaled
    extra_metadata: dict[str, Any] = field(default_factory=dict[str, Any])

    def is_global(self, layer: int) -> bool:
        return self.pattern is None or (layer + 1) % self.pattern == 0

    def window(self, layer: int) -> int:
        """The layer's sliding window (0: none): the file's, on the local layers."""
        stated = int(self.extra_metadata.get("attention.sliding_window", 0))
        return 0 if self.is_global(layer) else stated

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
    # 3 layers with a period of 3: two sliding-window (local base) layers, then a global one;
    # the window is shorter than the sequences the tests run, so it masks.
    "gemma3": Family("gemma3", "gemma3", 3, 1e6, 1e-6, qk_norm=True, post_norms=True,
                     geglu=True, embed_scale=True, local_base=1e4, pattern=3, query_scale=True,
                     extra_metadata={"attention.sliding_window": GEMMA3_WINDOW,
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


Weights = dict[str, tuple[str, np.ndarray]]


def model_start(rng: np.random.Generator, tied: bool, output_type: str, width: int = E
                ) -> tuple[Callable[[int, int], np.ndarray], Callable[[int], np.ndarray], Weights]:
    """Weight draws shared by every synthetic family: projections ~ N(0, 1/K) with per-row
    magnitudes over a decade, norm weights near 1; plus the embedding, final norm and (when
    untied) the output projection."""

    def proj(n: int, k: int) -> np.ndarray:
        rows = 10.0 ** rng.uniform(-0.5, 0.5, size=(n, 1))
        return (rng.standard_normal((n, k)) * rows / np.sqrt(k)).astype(F32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(F32)

    out: Weights = {
        "token_embd.weight": ("f32", rng.standard_normal((VOCAB, width)).astype(F32)),
        "output_norm.weight": ("f32", norm(width)),
    }
    if not tied:
        out["output.weight"] = (output_type, proj(VOCAB, width))
    return proj, norm, out



def synthetic_weights(fam: Family, seed: int, width: int = E, all_f32: bool = False
                      ) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (type, fp32 values).  Projections ~ N(0, 1/K) with per-row magnitudes over a
    decade, norm weights near 1, biases ~ N(0, 0.5^2), embeddings ~ N(0, 1).  `width` is the
    hidden size (E by default); `all_f32` types every tensor f32 (a file for llama.cpp's
    quantizer to choose the types of)."""
    E = width  # noqa: N806 (the hidden size of this model)
    rng = np.random.default_rng(seed)
    proj, norm, out = model_start(rng, fam.tied, "f32" if all_f32 else fam.output_type, E)
    shapes = {"attn_q": (H * D, E), "attn_k": (HKV * D, E), "attn_v": (HKV * D, E),
              "attn_output": (E, H * D), "ffn_gate": (FFN, E), "ffn_up": (FFN, E),
              "ffn_down": (E, FFN)}
    for i in range(fam.layers):
        p = f"blk.{i}."
        types = {s: "f32" for s in shapes} if all_f32 else tensor_types(fam, i)
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


def byte_level_vocab() -> tuple[list[str], list[str]]:
    """A GPT-2 style byte-level vocabulary of VOCAB tokens, enough for llama.cpp to load the
    file: the 256 byte symbols in GPT-2's byte-to-character mapping, then merged pairs of
    the letters a-p."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = iter(range(256, 512))
    chars = {b: chr(b if b in printable else next(shifted)) for b in range(256)}
    tokens = [chars[b] for b in range(256)]
    letters = "abcdefghijklmnop"
    merges = [f"{a} {b}" for a in letters for b in letters][: VOCAB - 256]
    tokens += [m.replace(" ", "") for m in merges]
    return tokens, merges


def add_tokenizer(writer: Any) -> None:
    tokens, merges = byte_level_vocab()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def write_gguf(fam: Family, path: Path, seed: int = 0, width: int = E,
               all_f32: bool = False) -> Path:
    """The family's test model; `width` and `all_f32` as in synthetic_weights."""
    import gguf

    writer = gguf.GGUFWriter(str(path), fam.arch)
    add_tokenizer(writer)
    a = fam.arch
    ints = {"block_count": fam.layers, "context_length": 4096, "embedding_length": width,
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
    for name, (kind, values) in synthetic_weights(fam, seed, width, all_f32).items():
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

    from v8dialect.builder.build import main
    from v8dialect.runtime.program import build, parse

    out = out_dir / f"{circuit}_{prefill_tokens}.mlir"
    # the numpy decoders model the portable contracts (swiglu_fp32_expf, geglu_fp32_tanh, ...)
    rc = main([str(gguf_path), "--circuit", circuit, "--prefill-tokens", str(prefill_tokens),
               "--kv-capacity", str(kv_capacity), "--set", "reference_arithmetic=portable",
               "-o", str(out)])
    assert rc == 0, f"v8-build exited {rc}"
    text = out.read_text()
    module = parse(text, str(out))
    args: dict[str, list[tuple[str, str | None, dict[str, float]]]] = {}
    renamed = 0
    for fn in module.ops:
        if not isinstance(fn, FuncOp) or not is_entry_point(fn):
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
            layout = entries.get("v8.layout")
            if isinstance(layout, StringAttr):  # a prepared copy: keyed as the session keys it
                transforms = {"layout": layout.data}
            rows.append((name, tensor.data if isinstance(tensor, StringAttr) else None,
                         transforms))
        args[fn.sym_name.data] = rows
    program = build(module, name=f"v8_e2e_{circuit}_{prefill_tokens}")
    for phase, rows in args.items():
        assert [b.name for b in program.phases[phase].inputs] == [r[0] for r in rows], phase
    return Built(program, text, args, renamed)


def load_transformed(values: np.ndarray, transforms: dict[str, Any], program: Any = None,
                     shape: tuple[int, ...] = ()) -> np.ndarray:
    """Apply the argument's load transforms, or make its prepared layout, as the model
    session does."""
    from v8dialect.runtime.model_session import prepare_weights, transformed

    layout = transforms.get("layout")
    if layout is not None:
        return prepare_weights(program, {("w", layout): shape}, {"w": values})[("w", layout)]
    return transformed(values, transforms)


class ProgramRunner:
    """Feeds a Program its weights (once, transformed as the IR says) and its KV caches
    (the same arrays across phases: the program writes them in place)."""

    def __init__(self, built: Built, weights: dict[str, tuple[str, np.ndarray]]) -> None:
        self.built = built
        self.program = built.program
        self.weights: dict[str, dict[str, np.ndarray]] = {}
        for phase, rows in built.args.items():
            shapes = {b.name: b.shape for b in self.program.phases[phase].inputs}
            self.weights[phase] = {name: load_transformed(weights[tensor][1], tf, self.program,
                                                          shapes[name])
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
        # 1.0f / sqrtf(D), on Q before attention or on the scores
        self.q_scale = F32(1.0) / np.sqrt(F32(D))
        self.scale = 1.0 if fam.query_scale else float(self.q_scale)
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
        window = self.fam.window(layer)
        if self.fam.query_scale:
            q = (q * self.q_scale).astype(F32)
        if phase == "decode" and not decode_single_range:
            return OM.f16_split_kv(q, kc, vc, H, HKV, kv_len, self.scale, self.tree, workers,
                                   window=window)
        if t < Q_TILE_THRESHOLD:
            return OM.f16_single_range(q, kc, vc, H, HKV, kv_len, n_past, True, self.scale,
                                       self.tree, window=window)
        return TM.tiled_attention(q, kc.view(np.float16), vc.view(np.float16), kv_len, n_past,
                                  True, self.scale, HKV, window=window)

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


# ---- interleaved M-RoPE and the gated-DeltaNet hybrid (qwen3vl, qwen35) ----------------------
#
# Two more families: the Qwen3 block with interleaved multi-section RoPE over four position
# streams, and Qwen3.5's hybrid of gated-DeltaNet layers and gated full attention.  Their
# numpy decoders are written from the published architectures (HF Qwen3-VL text model and
# Qwen3.5/Qwen3-Next: query-and-gate halves per head, sigmoid output gate, (1 + w) norms that
# the GGUF converter has already folded, post_attention_norm before the MLP, a recurrent mixer
# with in_proj_qkv/z/a/b and out_proj) and reuse the per-contract models by import:
# test_imrope.imrope_model and test_gated_delta.gdn_model.

from test_gated_delta import gdn_model  # noqa: E402
from test_imrope import imrope_model  # noqa: E402

# Qwen3.5 recurrent dims: 2 key heads of 32, 8 value heads of 32 (llama.cpp requires equal key
# and value head dims; 8 x 32 keeps the inner width a K-quant multiple of 256; value head h
# reads key head h % 2), causal convolution of width 4.
SSM_HK, SSM_DK, SSM_HV, SSM_DV, SSM_KERNEL = 2, 32, 8, 32, 4
SSM_CHANNELS = 2 * SSM_HK * SSM_DK + SSM_HV * SSM_DV


@dataclass(frozen=True)
class StreamFamily(Family):
    """A family whose RoPE reads [4][T] positions (t, h, w, e) split by `sections`."""

    rope_dims: int = D
    sections: tuple[int, int, int, int] = (12, 10, 10, 0)
    interval: int | None = None  # full_attention_interval; None: every layer is attention

    def is_attention(self, layer: int) -> bool:
        return self.interval is None or (layer + 1) % self.interval == 0


STREAM_FAMILIES = {
    # Qwen3-VL's own sections over 32 pairs (D = 64): sectors 30 and 31 fall to the e stream.
    "qwen3vl": StreamFamily("qwen3vl", "qwen3vl", 2, 5e6, 1e-6, qk_norm=True),
    # 3 recurrent : 1 attention, RoPE on half of each head (the rest copied), untied output.
    "qwen35": StreamFamily("qwen35", "qwen35", 4, 1e7, 1e-6, qk_norm=True, tied=False,
                           output_type="q6_k", rope_dims=D // 2, sections=(6, 5, 5, 0),
                           interval=4),
}


def stream_positions(n_past: int, t: int) -> np.ndarray:
    """[4][T] int32 positions.  The four streams differ on purpose (t = p, h and w a
    raster-like walk, e a small offset), so a wrong stream for any pair changes the bits;
    text-only tokens would give t = h = w and hide the interleave."""
    p = np.arange(n_past, n_past + t, dtype=np.int64)
    return np.stack([p, 3 + p // 4 * 2, 7 + p % 4 * 3, p % 2]).astype(np.int32)


def stream_tensor_types(fam: StreamFamily, layer: int) -> dict[str, str]:
    """Q4_K_M-like, with fp32 projections in layer 1, on the alpha rows and on qwen35's one
    attention layer's K, so all three linear contracts occur in both families (and in both
    layer kinds of qwen35); qwen3vl's logits are tied (fp32), qwen35's are Q6_K."""
    types = {"ffn_gate": "q4_k", "ffn_up": "q4_k", "ffn_down": "q6_k"}
    if fam.is_attention(layer):
        types |= {"attn_q": "q4_k", "attn_k": "q4_k", "attn_v": "q6_k", "attn_output": "q4_k"}
    else:
        types |= {"attn_qkv": "q4_k", "attn_gate": "q6_k", "ssm_alpha": "f32",
                  "ssm_beta": "q6_k", "ssm_out": "q4_k"}
    if layer == 1:
        types["ffn_up"] = "f32"
        types["attn_k" if fam.is_attention(layer) else "attn_gate"] = "f32"
    if fam.is_attention(layer) and fam.interval is not None:
        types["attn_k"] = "f32"  # qwen35 has one attention layer: give it an fp32 linear too
    return types


def stream_weights(fam: StreamFamily, seed: int, width: int = E, all_f32: bool = False
                   ) -> dict[str, tuple[str, np.ndarray]]:
    """As synthetic_weights: `width` is the hidden size, `all_f32` types every tensor f32."""
    E = width  # noqa: N806 (the hidden size of this model)
    rng = np.random.default_rng(seed)
    proj, norm, out = model_start(rng, fam.tied, "f32" if all_f32 else fam.output_type, E)
    gated = fam.interval is not None  # Qwen3.5's attention projects a query and a gate per head
    for i in range(fam.layers):
        p = f"blk.{i}."
        types = stream_tensor_types(fam, i)
        if all_f32:
            types = {stem: "f32" for stem in types}
        out[p + "attn_norm.weight"] = ("f32", norm(E))
        out[p + ("post_attention_norm" if gated else "ffn_norm") + ".weight"] = ("f32", norm(E))
        shapes = {"ffn_gate": (FFN, E), "ffn_up": (FFN, E), "ffn_down": (E, FFN)}
        if fam.is_attention(i):
            shapes |= {"attn_q": (H * D * (2 if gated else 1), E), "attn_k": (HKV * D, E),
                       "attn_v": (HKV * D, E), "attn_output": (E, H * D)}
            out[p + "attn_q_norm.weight"] = ("f32", norm(D))
            out[p + "attn_k_norm.weight"] = ("f32", norm(D))
        else:
            inner = SSM_HV * SSM_DV
            shapes |= {"attn_qkv": (SSM_CHANNELS, E), "attn_gate": (inner, E),
                       "ssm_alpha": (SSM_HV, E), "ssm_beta": (SSM_HV, E),
                       "ssm_out": (E, inner)}
            out[p + "ssm_conv1d.weight"] = (
                "f32", (0.5 * rng.standard_normal((SSM_CHANNELS, SSM_KERNEL))).astype(F32))
            # GGUF stores A = -exp(A_log); the decay exp(softplus(.) * A) stays in (0, 1)
            out[p + "ssm_a"] = ("f32", (-np.exp(rng.standard_normal(SSM_HV))).astype(F32))
            out[p + "ssm_dt.bias"] = ("f32", rng.standard_normal(SSM_HV).astype(F32))
            out[p + "ssm_norm.weight"] = ("f32", norm(SSM_DV))
        for stem, (n, k) in shapes.items():
            out[p + stem + ".weight"] = (types[stem], proj(n, k))
    return out


def write_stream_gguf(fam: StreamFamily, path: Path, seed: int = 0, width: int = E,
                      all_f32: bool = False) -> Path:
    """The family's test model; `width` and `all_f32` as in stream_weights."""
    import gguf

    writer = gguf.GGUFWriter(str(path), fam.arch)
    add_tokenizer(writer)
    a = fam.arch
    ints = {"block_count": fam.layers, "context_length": 4096, "embedding_length": width,
            "feed_forward_length": FFN, "attention.head_count": H,
            "attention.head_count_kv": HKV, "attention.key_length": D,
            "attention.value_length": D, "vocab_size": VOCAB,
            "rope.dimension_count": fam.rope_dims}
    if fam.interval is not None:
        ints |= {"full_attention_interval": fam.interval, "ssm.conv_kernel": SSM_KERNEL,
                 "ssm.state_size": SSM_DK, "ssm.group_count": SSM_HK,
                 "ssm.time_step_rank": SSM_HV, "ssm.inner_size": SSM_HV * SSM_DV}
    for key, value in ints.items():
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", fam.eps)
    writer.add_float32(f"{a}.rope.freq_base", fam.rope_base)
    writer.add_array(f"{a}.rope.dimension_sections", list(fam.sections))
    qtypes = {"q4_k": gguf.GGMLQuantizationType.Q4_K, "q6_k": gguf.GGMLQuantizationType.Q6_K}
    for name, (kind, values) in stream_weights(fam, seed, width, all_f32).items():
        if kind == "f32":
            writer.add_tensor(name, values)
        else:
            writer.add_tensor(name, ggml_quantize(kind, values), raw_dtype=qtypes[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class StreamRunner(ProgramRunner):
    """ProgramRunner with [4][T] positions and, for recurrent layers, fp32 conv/ssm states
    kept across phases like the KV caches (the program updates them in place)."""

    def reset(self) -> None:
        super().reset()
        sig = self.program.phases["decode"]
        self.states = {b.name: np.zeros(b.shape, F32) for b in sig.inputs
                       if b.name.endswith(("conv_state", "ssm_state"))}

    def run(self, phase: str, tokens: np.ndarray, n_past: int, workers: int) -> np.ndarray:
        t = len(tokens)
        (logits,) = self.program.run(
            phase, n_past=n_past, workers=workers, tokens=np.asarray(tokens, np.int32),
            positions=stream_positions(n_past, t), **self.caches, **self.states,
            **self.weights[phase])
        return logits


class StreamDecoder(NumpyDecoder):
    """Numpy Qwen3-VL text decoder / Qwen3.5 hybrid decoder under the circuits' contracts,
    with its own fp16 KV caches (attention layers) and fp32 conv/ssm states (recurrent)."""

    fam: StreamFamily

    def reset(self) -> None:
        super().reset()
        self.conv = {i: np.zeros((SSM_CHANNELS, SSM_KERNEL - 1), F32)
                     for i in range(self.fam.layers) if not self.fam.is_attention(i)}
        self.ssm = {i: np.zeros((SSM_HV, SSM_DV, SSM_DK), F32)
                    for i in range(self.fam.layers) if not self.fam.is_attention(i)}

    def rope(self, x: np.ndarray, pos4: np.ndarray) -> np.ndarray:
        fam = self.fam
        return imrope_model(x, pos4, fam.rope_dims, fam.rope_base, fam.sections)

    def attention_layer(self, i: int, h: np.ndarray, pos4: np.ndarray, n_past: int,
                        phase: str, workers: int, single: bool) -> np.ndarray:
        p, t = f"blk.{i}.", h.shape[0]
        gated = self.fam.interval is not None
        q = self.linear(p + "attn_q.weight", h)
        gate = None
        if gated:
            # Qwen3.5: each head's projection is [query | gate] (torch.chunk on the head dim)
            qg = q.reshape(t, H, 2 * D)
            q, gate = np.ascontiguousarray(qg[..., :D]), np.ascontiguousarray(qg[..., D:])
        q = q.reshape(t, H, D)
        k = self.linear(p + "attn_k.weight", h).reshape(t, HKV, D)
        v = self.linear(p + "attn_v.weight", h).reshape(t, HKV, D)
        q = self.rope(self.norm(p + "attn_q_norm.weight", q), pos4)
        k = self.rope(self.norm(p + "attn_k_norm.weight", k), pos4)
        self.k[i][:, n_past:n_past + t] = k.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
        self.v[i][:, n_past:n_past + t] = v.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
        att = self.attention(i, q, n_past, phase, workers, single)
        if gate is not None:
            # sigmoid_gate_fp32_expf: x * (1 / (1 + expf(-g))), every step rounded to fp32
            att = (att * (F32(1.0) / (F32(1.0) + OPS._libm_map("expf", -gate)))).astype(F32)
        return self.linear(p + "attn_output.weight", att.reshape(t, H * D))

    def recurrent_layer(self, i: int, h: np.ndarray) -> np.ndarray:
        p = f"blk.{i}."
        inputs = {
            "hk": SSM_HK, "dk": SSM_DK, "hv": SSM_HV, "dv": SSM_DV, "eps": self.fam.eps,
            "qkv": self.linear(p + "attn_qkv.weight", h),
            "z": self.linear(p + "attn_gate.weight", h),
            "alpha": self.linear(p + "ssm_alpha.weight", h),
            "beta": self.linear(p + "ssm_beta.weight", h),
            "conv_w": self.w[p + "ssm_conv1d.weight"][1], "ssm_a": self.w[p + "ssm_a"][1],
            "dt_bias": self.w[p + "ssm_dt.bias"][1], "norm_w": self.w[p + "ssm_norm.weight"][1],
            "conv_state": self.conv[i], "ssm_state": self.ssm[i],
        }
        y, self.conv[i], self.ssm[i] = gdn_model(inputs)
        return self.linear(p + "ssm_out.weight", y)

    def forward(self, tokens: np.ndarray, n_past: int, phase: str, workers: int = 1,
                decode_single_range: bool = False) -> np.ndarray:
        fam = self.fam
        pos4 = stream_positions(n_past, len(tokens))
        x = OPS.embedding(self.table, tokens)
        mlp_norm = "post_attention_norm" if fam.interval is not None else "ffn_norm"
        for i in range(fam.layers):
            p = f"blk.{i}."
            h = self.norm(p + "attn_norm.weight", x)
            if fam.is_attention(i):
                o = self.attention_layer(i, h, pos4, n_past, phase, workers,
                                         decode_single_range)
            else:
                o = self.recurrent_layer(i, h)
            x = OPS.residual_add(o, x)
            h2 = self.norm(p + mlp_norm + ".weight", x)
            act = OPS.swiglu(self.linear(p + "ffn_gate.weight", h2),
                             self.linear(p + "ffn_up.weight", h2))
            x = OPS.residual_add(self.linear(p + "ffn_down.weight", act), x)
        final = self.norm("output_norm.weight", x)
        return self.linear("token_embd.weight" if fam.tied else "output.weight", final)


# Shared by test modules that must not import another test module or `conftest` by name
# (pytest sees several conftest.py files; which one the name `conftest` resolves to depends
# on collection order).


def ggml_missing() -> str | None:
    """Why real K-quant bytes cannot be produced here, or None."""
    try:
        import ggml  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure: no ggml_quantize_chunk
        return f"ggml-python (ggml_quantize_chunk) not importable: {exc}"
    return None


def contract_ids(module_text: str) -> str:
    import re

    return "+".join(sorted(set(re.findall(r'contract #v8\.\w+<"([a-z0-9_]+)"', module_text))))


def tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.int32)
