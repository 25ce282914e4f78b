"""A tiny synthetic Qwen3-VL vision encoder in a real GGUF file (random weights).

    python vision_gguf.py out.gguf [--drop TENSOR]... [--set KEY=INT]...

Tensor names and metadata follow circuits/qwen3vl_vision.json (prefix `v.`,
keys under `clip.vision.`); K-quant weights hold random bytes, since the
builder reads types and shapes only.  Every K is a multiple of 256.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

E, H, D, FFN, PROJ, LAYERS = 256, 4, 64, 512, 512, 2
Q4_K, Q6_K, F32 = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.F32

METADATA: dict[str, int | float | str | list[int]] = {
    "clip.projector_type": "qwen3vl_merger",
    "clip.vision.block_count": LAYERS,
    "clip.vision.embedding_length": E,
    "clip.vision.feed_forward_length": FFN,
    "clip.vision.attention.head_count": H,
    "clip.vision.projection_dim": PROJ,
    "clip.vision.attention.layer_norm_epsilon": 1e-6,
    "clip.vision.rope.dimension_sections": [D // 4] * 4,
}

BLOCK = [
    ("ln1.weight", (E,), F32), ("ln1.bias", (E,), F32),
    ("attn_qkv.weight", (3 * E, E), Q4_K), ("attn_qkv.bias", (3 * E,), F32),
    ("attn_out.weight", (E, E), Q6_K), ("attn_out.bias", (E,), F32),
    ("ln2.weight", (E,), F32), ("ln2.bias", (E,), F32),
    ("ffn_up.weight", (FFN, E), Q4_K), ("ffn_up.bias", (FFN,), F32),
    ("ffn_down.weight", (E, FFN), Q6_K), ("ffn_down.bias", (E,), F32),
]
GLOBALS = [
    ("post_ln.weight", (E,), F32), ("post_ln.bias", (E,), F32),
    ("mm.0.weight", (4 * E, 4 * E), F32), ("mm.0.bias", (4 * E,), F32),
    ("mm.2.weight", (PROJ, 4 * E), Q4_K), ("mm.2.bias", (PROJ,), F32),
]


def raw(shape: tuple[int, ...], qtype: GGMLQuantizationType, rng: np.random.Generator) -> np.ndarray:
    if qtype == F32:
        return rng.standard_normal(shape).astype(np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    return rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)


def write(out: Path, drop: Sequence[str] = (), overrides: dict[str, int] | None = None,
          seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(out, "clip")
    metadata = {**METADATA, **(overrides or {})}
    for key, value in metadata.items():
        if isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    layers = int(metadata["clip.vision.block_count"])
    tensors = [(f"v.{n}", s, q) for n, s, q in GLOBALS]
    tensors += [(f"v.blk.{i}.{n}", s, q) for i in range(layers) for n, s, q in BLOCK]
    for name, shape, qtype in tensors:
        if name not in drop:
            writer.add_tensor(name, raw(shape, qtype, rng), raw_dtype=None if qtype == F32 else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--drop", action="append", default=[])
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    write(args.out, args.drop, {k: int(v) for k, v in (s.split("=", 1) for s in args.set)})


if __name__ == "__main__":
    main()
