"""Tiny synthetic GGUF models for the builder tests (random weights, real GGUF files).

    python tiny_gguf.py <preset> out.gguf [--drop TENSOR]... [--set KEY=INT]... [--untied]

Dims are small but legal for K-quants (every K is a multiple of 256).  The
quantized tensors hold random bytes: the builder reads types and shapes, not
values.  Presets name the tensors each family's GGUF converter writes.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

E, H, HKV, D, FFN, VOCAB, LAYERS = 256, 4, 2, 64, 512, 512, 2

Q4_K, Q6_K, F32 = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.F32


@dataclass
class Preset:
    arch: str
    metadata: dict[str, int | float | str | list[int]]
    block: list[tuple[str, tuple[int, ...], GGMLQuantizationType]]
    globals_: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = field(default_factory=list)


def attention_tensors(
    qk_norm: bool, bias: bool
) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType]]:
    tensors = [
        ("attn_norm.weight", (E,), F32),
        ("attn_q.weight", (H * D, E), Q4_K),
        ("attn_k.weight", (HKV * D, E), Q4_K),
        ("attn_v.weight", (HKV * D, E), Q6_K),
        ("attn_output.weight", (E, H * D), Q4_K),
    ]
    if qk_norm:
        tensors += [("attn_q_norm.weight", (D,), F32), ("attn_k_norm.weight", (D,), F32)]
    if bias:
        tensors += [
            ("attn_q.bias", (H * D,), F32),
            ("attn_k.bias", (HKV * D,), F32),
            ("attn_v.bias", (HKV * D,), F32),
        ]
    return tensors


MLP = [
    ("ffn_norm.weight", (E,), F32),
    ("ffn_gate.weight", (FFN, E), Q4_K),
    ("ffn_up.weight", (FFN, E), Q4_K),
    ("ffn_down.weight", (E, FFN), Q6_K),
]
GLOBALS = [
    ("token_embd.weight", (VOCAB, E), F32),
    ("output_norm.weight", (E,), F32),
    ("output.weight", (VOCAB, E), Q6_K),
]


def common(arch: str, base: float) -> dict[str, int | float | str | list[int]]:
    return {
        f"{arch}.block_count": LAYERS,
        f"{arch}.context_length": 4096,
        f"{arch}.embedding_length": E,
        f"{arch}.feed_forward_length": FFN,
        f"{arch}.attention.head_count": H,
        f"{arch}.attention.head_count_kv": HKV,
        f"{arch}.attention.key_length": D,
        f"{arch}.attention.value_length": D,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": base,
        f"{arch}.vocab_size": VOCAB,
    }


PRESETS = {
    "qwen3": Preset("qwen3", common("qwen3", 1e6), attention_tensors(True, False) + MLP, GLOBALS),
    "qwen2": Preset("qwen2", common("qwen2", 1e6), attention_tensors(False, True) + MLP, GLOBALS),
    "llama": Preset("llama", common("llama", 1e4), attention_tensors(False, False) + MLP, GLOBALS),
    "gemma3": Preset(
        "gemma3",
        {**common("gemma3", 1e6), "gemma3.attention.sliding_window": 512, "gemma3.block_count": 6},
        attention_tensors(True, False)
        + MLP
        + [("post_attention_norm.weight", (E,), F32), ("post_ffw_norm.weight", (E,), F32)],
        [t for t in GLOBALS if t[0] != "output.weight"],
    ),
    "qwen3vl": Preset(
        "qwen3vl",
        {**common("qwen3vl", 5e6), "qwen3vl.rope.dimension_sections": [12, 10, 10, 0]},
        attention_tensors(True, False) + MLP,
        GLOBALS,
    ),
}


def raw_bytes(
    shape: tuple[int, ...], qtype: GGMLQuantizationType, rng: np.random.Generator
) -> np.ndarray:
    if qtype == F32:
        return rng.standard_normal(shape).astype(np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    return rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)


def write(
    preset: Preset,
    out: Path,
    drop: Sequence[str] = (),
    overrides: dict[str, int] | None = None,
    untied: bool = False,
    seed: int = 0,
    matrices: GGMLQuantizationType | None = None,
    retype: dict[str, GGMLQuantizationType] | None = None,
) -> Path:
    """The preset as a GGUF file; `matrices` replaces the type of every quantized tensor,
    `retype` the types of the named tensors (after `matrices`)."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(out, preset.arch)
    metadata = {**preset.metadata, **(overrides or {})}
    for key, value in metadata.items():
        if key == "general.architecture":
            continue
        if isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    layers = int(metadata[f"{preset.arch}.block_count"])
    tensors = list(preset.globals_)
    if untied and not any(t[0] == "output.weight" for t in tensors):
        tensors.append(("output.weight", (VOCAB, E), Q6_K))
    tensors += [
        (f"blk.{i}.{name}", shape, q) for i in range(layers) for name, shape, q in preset.block
    ]
    for name, shape, qtype in tensors:
        if name in drop:
            continue
        if matrices is not None and qtype != F32:
            qtype = matrices
        qtype = (retype or {}).get(name, qtype)
        data = raw_bytes(shape, qtype, rng)
        writer.add_tensor(name, data, raw_dtype=None if qtype == F32 else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--drop", action="append", default=[])
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--untied", action="store_true")
    args = parser.parse_args()
    overrides = {k: int(v) for k, v in (s.split("=", 1) for s in args.set)}
    write(PRESETS[args.preset], args.out, args.drop, overrides, args.untied)


if __name__ == "__main__":
    main()
