"""The libggml that llama.cpp ships (llama-cpp-python's own), loaded through ctypes: its
library folder, the C signatures the per-op oracle calls, ggml's type ids and block sizes.

Both libraries load with a private symbol scope (RTLD_LOCAL | RTLD_DEEPBIND), so this ggml
shares a process with another (ggml-python's) without taking or giving symbols.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from v8dialect.parity.llamacpp import OracleMissing

TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
         "q4_k": 12, "q5_k": 13, "q6_k": 14, "bf16": 30}
BLOCK = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q4_0": (32, 18), "q4_1": (32, 20),
         "q5_0": (32, 22), "q5_1": (32, 24), "q8_0": (32, 34), "q4_k": (256, 144),
         "q5_k": (256, 176), "q6_k": (256, 210)}


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


def llama_cpp_lib_dir() -> Path:
    """llama-cpp-python's library folder, found without importing the package (its import
    loads llama.cpp into the process's global symbol scope); LLAMA_CPP_LIB_PATH when set, as
    llama_cpp itself reads it: both must load the same libggml (the loader reuses a loaded
    library of the same name, so a second folder's libllama would run the first's ggml)."""
    import importlib.util

    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise OracleMissing("llama-cpp-python is not installed; install the 'oracle' extra: "
                            "pip install -e '.[oracle]'")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def _sanitizer_runtime_loaded() -> bool:
    """Whether AddressSanitizer's runtime is mapped into this process (LD_PRELOAD)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libasan" in line for line in maps)
    except OSError:
        return False


def load_libraries() -> tuple[Any, Any]:
    """libggml-base and libggml-cpu, every signature declared, the CPU backend initialized."""
    # Private symbol scope, own dependencies first: this ggml must neither take nor give
    # symbols to another ggml loaded in the same process (ggml-python's).
    if _sanitizer_runtime_loaded():
        # the ASan runtime aborts the whole process on a RTLD_DEEPBIND dlopen
        raise OracleMissing("llama.cpp's libggml loads with RTLD_DEEPBIND, which the "
                            "AddressSanitizer runtime in this process refuses")
    mode = os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0) | os.RTLD_NOW
    lib_dir = llama_cpp_lib_dir()
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"), mode=mode)
    cpu = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"), mode=mode)
    p, i64, sz, f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_float
    signatures: dict[str, tuple[Any, list[Any], Any]] = {
        "ggml_init": (base, [InitParams], p),
        "ggml_free": (base, [p], None),
        "ggml_new_tensor_1d": (base, [p, ctypes.c_int, i64], p),
        "ggml_new_tensor_2d": (base, [p, ctypes.c_int, i64, i64], p),
        "ggml_new_tensor_3d": (base, [p, ctypes.c_int, i64, i64, i64], p),
        "ggml_rope_ext": (base, [p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, f, f, f, f, f, f], p),
        "ggml_rope_multi": (base, [p, p, p, p, ctypes.c_int, ctypes.c_int * 4, ctypes.c_int,
                                   ctypes.c_int, f, f, f, f, f, f], p),
        "ggml_mul_mat": (base, [p, p, p], p),
        "ggml_get_rows": (base, [p, p, p], p),
        "ggml_swiglu_split": (base, [p, p, p], p),
        "ggml_geglu_split": (base, [p, p, p], p),
        "ggml_new_graph": (base, [p], p),
        "ggml_build_forward_expand": (base, [p, p], None),
        "ggml_flash_attn_ext": (base, [p, p, p, p, p, f, f, f], p),
        "ggml_flash_attn_ext_set_prec": (base, [p, ctypes.c_int], None),
        "ggml_quantize_chunk": (base, [ctypes.c_int, p, p, i64, i64, i64, p], sz),
        # the Qwen3.5 recurrent chain (gated_delta_chain)
        "ggml_new_tensor_4d": (base, [p, ctypes.c_int, i64, i64, i64, i64], p),
        "ggml_view_4d": (base, [p, p, i64, i64, i64, i64, sz, sz, sz, sz], p),
        "ggml_reshape_4d": (base, [p, p, i64, i64, i64, i64], p),
        "ggml_transpose": (base, [p, p], p),
        "ggml_concat": (base, [p, p, p, ctypes.c_int], p),
        "ggml_ssm_conv": (base, [p, p, p], p),
        "ggml_silu": (base, [p, p], p),
        "ggml_sigmoid": (base, [p, p], p),
        "ggml_softplus": (base, [p, p], p),
        "ggml_add": (base, [p, p, p], p),
        "ggml_mul": (base, [p, p, p], p),
        "ggml_rms_norm": (base, [p, p, f], p),
        "ggml_scale": (base, [p, p, f], p),
        "ggml_gated_delta_net": (base, [p, p, p, p, p, p, p, i64], p),
        "ggml_graph_compute_with_ctx": (cpu, [p, p, ctypes.c_int], ctypes.c_int),
        "ggml_cpu_init": (cpu, [], None),
        # what the CPU backend was compiled for (not what the running CPU has)
        "ggml_cpu_has_avx512": (cpu, [], ctypes.c_int),
        "ggml_cpu_has_avx2": (cpu, [], ctypes.c_int),
        "ggml_backend_alloc_ctx_tensors_from_buft": (base, [p, p], p),
        "ggml_backend_buffer_free": (base, [p], None),
        "ggml_backend_buffer_name": (base, [p], ctypes.c_char_p),
        "ggml_backend_tensor_set": (base, [p, p, sz, sz], None),
        "ggml_backend_graph_compute": (base, [p, p], ctypes.c_int),
        "ggml_backend_free": (base, [p], None),
        "ggml_backend_cpu_buffer_type": (base, [], p),
        "ggml_backend_cpu_init": (cpu, [], p),
        "ggml_backend_cpu_set_n_threads": (cpu, [p, ctypes.c_int], None),
        # C++ linkage: ggml::cpu's repack buffer type, ggml_backend_cpu_repack_buffer_type()
        "_Z35ggml_backend_cpu_repack_buffer_typev": (cpu, [], p),
    }
    for name, (lib, args, res) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    cpu.ggml_cpu_init()
    return base, cpu


def row_bytes(dtype: str, cols: int) -> int:
    per, nbytes = BLOCK[dtype]
    if cols % per:
        raise ValueError(f"{dtype} rows hold multiples of {per} values, got {cols}")
    return cols // per * nbytes
