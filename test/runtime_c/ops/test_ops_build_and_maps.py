"""runtime_c/ops builds warning-free in both ISA configurations, never
contracts a product into an FMA whatever the flags, and its kernel maps
agree with the header they name."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from v8dialect.data.paths import runtime_c_dir, runtime_include_dir

ROOT = runtime_c_dir()
SOURCES = sorted((ROOT / "ops").glob("*.c")) + sorted((ROOT / "core").glob("*.c"))
STRICT = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c"]
CONFIGS = {
    "baseline": ["-march=x86-64"],
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    # the flags most likely to fuse a*b+c: GNU mode, native ISA, contraction on
    "gnu_native_contract_fast": ["-std=gnu11", "-march=native", "-ffp-contract=fast", "-O3"],
}


def cc() -> str:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("no C compiler")
    return compiler


# Sources whose contracts are written in fused multiply-adds: the fusions are explicit
# (fmaf and FMA intrinsics), contraction of anything else stays off.
FUSED_BY_CONTRACT = {
    "glu_ggml.c": "swiglu_fp32_ggml_vexp: ggml's polynomial exp is a chain of FMAs; "
                  "geglu_fp32_ggml_fp16_table: the table's 1 + (A x) x is one FMA",
    "rope.c": "rope_*_ggml_fma: one product of each rotated output is fused (fmaf)",
    "gated_delta_ggml.c": "gated_delta_rule_fp32_ggml_{16,8}_lane_chain: ggml's polynomial "
                          "exp, the dot-product lanes and the state update are fmas, and the "
                          "16-lane chain's conv taps",
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_sources_compile_warning_free(tmp_path: Path, config: str) -> None:
    for src in SOURCES:
        obj = tmp_path / (src.stem + ".o")
        cmd = [cc(), *STRICT, *CONFIGS[config], f"-I{runtime_include_dir()}", f"-I{ROOT}",
               str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, (" ".join(cmd), proc.stderr)
        if src.parent.name == "ops" and src.name not in FUSED_BY_CONTRACT and shutil.which("objdump"):
            asm = subprocess.run(["objdump", "-d", str(obj)], capture_output=True,
                                 text=True).stdout
            fused = re.findall(r"\bvfn?m(add|sub)\w*", asm)
            assert not fused, f"{src.name} ({config}) contains FMA instructions: {fused[:3]}"


def test_header_compiles_as_cxx(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler")  # optional: the header's extern "C" guard
    src = tmp_path / "use.cc"
    src.write_text('#include "ops/v8_ops.h"\n'
                   "int main() { return V8_RMSNORM_FP32_FP64_SUM_ASCENDING == 0; }\n")
    proc = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                           f"-I{runtime_include_dir()}", f"-I{ROOT}", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


MAP_KEYS_COMMON = {"schema", "id", "status", "description", "op", "phases", "dtypes", "layout",
                   "contracts", "isa_dispatch", "threading", "constraints"}
MAP_KEYS_CALL = MAP_KEYS_COMMON | {"functions", "header", "sources", "abi", "lane_trees"}
MAP_KEYS_INLINE = MAP_KEYS_COMMON | {"emission"}


def load_maps() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "ops").glob("*.kmap.json"))]


def test_kernel_maps_follow_the_schema() -> None:
    """A self-check against the README schema; that each map's functions, ABI and selectors
    are the header's prototypes and enum constants is the project loader's check (below)."""
    maps = load_maps()
    assert len({m["id"] for m in maps}) == len(maps)
    for m in maps:
        assert m["schema"] == "v8.kernel_map/1"
        inline = m.get("emission", "call") == "inline"
        assert set(m) <= (MAP_KEYS_INLINE if inline else MAP_KEYS_CALL), m["id"]
        if inline:
            assert m["threading"]["runtime"] == "serial"
            assert m["isa_dispatch"] == {"kind": "runtime",
                                         "variants": ["avx512", "avx2", "scalar"]}
            continue
        for src in m["sources"]:
            assert (ROOT / src).is_file(), src
        assert (ROOT / m["header"]).is_file()
        if m["threading"]["runtime"] == "threadpool":
            assert m["threading"]["dispatch"] == "v8_parallel_for"


OPS_MAP_IDS = {"rmsnorm_fp32", "qk_norm_fp32", "rope_fp32", "mrope_fp32", "embedding_fp32",
               "linear_fp32", "residual_add_fp32_inline", "swiglu_fp32_inline",
               "geglu_fp32_inline", "kv_store_f16"}


def test_project_loader_accepts_the_ops_maps() -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.data.kernel_maps import load_kernel_maps

    maps = load_kernel_maps(load_registry())
    loaded = {m.id: m for m in maps.maps}
    assert set(loaded) >= OPS_MAP_IDS
    assert loaded["linear_fp32"].selectors == {
        "linear_fp32_ascending_fp32_accumulate": "V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE",
        "logits_fp32_ascending_fp32_accumulate": "V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE",
    }
    for map_id in OPS_MAP_IDS:
        inline = map_id.endswith("_inline")
        assert loaded[map_id].emission == ("inline" if inline else "call")
