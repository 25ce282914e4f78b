"""llama.cpp's own quantizer (`llama_model_quantize`, the oracle extra) on a GGUF file:

    python -m v8dialect.parity.quantize in.gguf out.gguf Q4_K_M [--threads N]

writes the file llama.cpp's `llama-quantize` would write for that file type (its tensor type
choices, fallbacks for widths a K-quant cannot hold, token embedding and output types), and
prints each tensor's type.  It imports llama_cpp, which loads llama.cpp into the process's
global symbol scope: run it as its own process next to anything that loads another ggml.
"""

from __future__ import annotations

import ctypes
import sys
from collections import Counter
from pathlib import Path

from v8dialect.driver.cli_args import ArgumentParser

FILE_TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_S", "Q4_K_M",
              "Q5_K_S", "Q5_K_M", "Q6_K")


def quantize(src: Path, dst: Path, file_type: str, threads: int = 1) -> None:
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}", None)
    if file_type not in FILE_TYPES or ftype is None:
        raise ValueError(f"unknown file type '{file_type}' (one of {', '.join(FILE_TYPES)})")
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(),
                                            ctypes.pointer(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, {file_type}) returned {status}")


def tensor_types(path: Path) -> dict[str, str]:
    from gguf import GGUFReader

    return {t.name: t.tensor_type.name.lower() for t in GGUFReader(str(path)).tensors}


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m v8dialect.parity.quantize",
                                 description="quantize a GGUF file with llama.cpp's quantizer")
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("file_type", choices=FILE_TYPES)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        quantize(args.src, args.dst, args.file_type, args.threads)
    except (RuntimeError, ValueError, ImportError) as exc:
        print(f"{args.src}: error: {exc}", file=sys.stderr)
        return 1
    types = tensor_types(args.dst)
    counts = Counter(types.values())
    print(f"{args.dst}: " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())))
    for name in ("token_embd.weight", "output.weight"):
        if name in types:
            print(f"  {name}: {types[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
