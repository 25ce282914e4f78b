"""Writes the fixture kernel maps the resolver lit tests use (run: python generate.py).

They describe C functions declared in include/fixture.h but never built: the
resolver only reads maps and headers.
"""

import json
from pathlib import Path

HERE = Path(__file__).parent

ATTN_DTYPES = {"q": "f32", "kv": "f16", "out": "f32"}
ATTN_LAYOUT = {"q": "token_major", "kv": "head_major_strided", "out": "token_major"}
ATTN_ABI = [
    {"name": "contract", "ctype": "int", "role": "selector"},
    {"name": "out", "ctype": "float *", "role": "output"},
    {"name": "q", "ctype": "const float *", "role": "input"},
    {"name": "k", "ctype": "const void *", "role": "kv_cache"},
    {"name": "v", "ctype": "const void *", "role": "kv_cache"},
    {"name": "n_q", "ctype": "int64_t", "role": "dim"},
]
LIN_ABI = [
    {"name": "contract", "ctype": "int", "role": "selector"},
    {"name": "y", "ctype": "float *", "role": "output"},
    {"name": "w", "ctype": "const void *", "role": "weight"},
    {"name": "x", "ctype": "const float *", "role": "input"},
    {"name": "n", "ctype": "int64_t", "role": "dim"},
    {"name": "k", "ctype": "int64_t", "role": "dim"},
]
ELT_ABI = [
    {"name": "contract", "ctype": "int", "role": "selector"},
    {"name": "y", "ctype": "float *", "role": "output"},
    {"name": "x", "ctype": "const float *", "role": "input"},
    {"name": "n", "ctype": "int64_t", "role": "dim"},
]
RUNTIME = {"kind": "runtime", "variants": ["avx512", "avx2", "scalar"]}


def call_map(map_id, op, phases, dtypes, layout, contracts, partitions, abi, fn, **extra):
    return {
        "schema": "v8.kernel_map/1", "id": map_id, "op": op, "phases": phases,
        "dtypes": dtypes, "layout": layout,
        "contracts": [{"id": c, "selector": s} for c, s in contracts],
        "isa_dispatch": RUNTIME,
        "threading": {"runtime": "threadpool", "dispatch": "v8_parallel_for",
                      "work_partitions": [{"kind": k, "reduction_order_effect": e} for k, e in partitions]},
        "functions": {"oracle": f"{fn}_ref", "production": fn, "threadpool": f"{fn}_parallel_dispatch"},
        "header": "include/fixture.h", "sources": [], "abi": {"returns": "v8_status", "args": abi},
        "lane_trees": {"avx512": "fixture tree 512", "avx2": "fixture tree 256", "scalar": "fixture tree 256"},
        "status": "unresolved", **extra,
    }


def inline_map(map_id, op, roles, contract):
    return {
        "schema": "v8.kernel_map/1", "id": map_id, "op": op, "phases": ["prefill", "decode"],
        "dtypes": {r: "f32" for r in roles}, "layout": {r: "contiguous" for r in roles},
        "contracts": [{"id": contract, "selector": "V8_FIXTURE_INLINE"}], "emission": "inline",
        "isa_dispatch": RUNTIME,
        "threading": {"runtime": "serial", "work_partitions": [{"kind": "serial", "reduction_order_effect": "none"}]},
        "status": "unresolved",
    }


def quant(fmt, form, phase):
    contract = f"{fmt}_x_q8_k_fp32_block_order"
    partitions = [("independent_rows", "none")] if form == "gemv" else [("independent_rows", "none"), ("output_tiles", "none")]
    return call_map(
        f"fixture.{fmt}.{form}", "linear", [phase],
        {"weight": fmt, "activation": "f32", "output": "f32"},
        {"weight": "row_blocks", "activation": "contiguous", "output": "contiguous"},
        [(contract, f"V8_FIXTURE_{fmt.upper()}_BLOCK_ORDER")], partitions, LIN_ABI,
        f"fixture_{fmt}_{form}", constraints={"k_multiple_of": 256})


def elementwise(map_id, op, roles, contract, selector, fn, partition="independent_rows"):
    return call_map(map_id, op, ["prefill", "decode"], {r: "f32" for r in roles},
                    {r: ("token_major" if op in ("rope", "qk_norm") and r not in ("positions", "weight") else "contiguous") for r in roles},
                    [(contract, selector)], [(partition, "none")], ELT_ABI, fn)


MAPS = {
    "attention_split_kv": call_map(
        "fixture.attention.split_kv", "attention", ["decode"], ATTN_DTYPES, ATTN_LAYOUT,
        [("f16_online_fp32_merge", "V8_FIXTURE_F16_ONLINE_FP32_MERGE")],
        [("kv_chunks_by_workers", "contract_defined")], ATTN_ABI, "fixture_attn_split_kv",
        constraints={"head_dim_multiple_of": 8}),
    "attention_auto": call_map(
        "fixture.attention.auto", "attention", ["prefill"], ATTN_DTYPES, ATTN_LAYOUT,
        [("f16_flash_auto_qtile64", "V8_FIXTURE_FLASH_AUTO")],
        [("independent_heads", "none")], ATTN_ABI, "fixture_attn_auto",
        constraints={"head_dim_multiple_of": 8}),
    "q4_k_gemv": quant("q4_k", "gemv", "decode"),
    "q4_k_gemm": quant("q4_k", "gemm", "prefill"),
    "q6_k_gemv": quant("q6_k", "gemv", "decode"),
    "q6_k_gemm": quant("q6_k", "gemm", "prefill"),
    "rmsnorm": elementwise("fixture.rmsnorm", "rmsnorm", ("input", "weight", "output"),
                           "rmsnorm_fp32_fp64_sum_ascending", "V8_FIXTURE_RMSNORM", "fixture_rmsnorm"),
    "qk_norm": elementwise("fixture.qk_norm", "qk_norm", ("input", "weight", "output"),
                           "qk_norm_fp32_fp64_sum_ascending", "V8_FIXTURE_QK_NORM", "fixture_qk_norm"),
    "embedding": elementwise("fixture.embedding", "embedding", ("table", "output"),
                             "embedding_fp32_row_copy", "V8_FIXTURE_EMBEDDING", "fixture_embedding"),
    "swiglu": inline_map("fixture.swiglu", "swiglu", ("gate", "up", "output"), "swiglu_fp32_expf"),
    "residual_add": inline_map("fixture.residual_add", "residual_add", ("input", "residual", "output"),
                               "residual_add_fp32"),
}
MAPS["embedding"]["dtypes"]["ids"] = "i32"
MAPS["embedding"]["layout"]["ids"] = "contiguous"
rope = elementwise("fixture.rope", "rope", ("input", "output"), "rope_neox_fp32_iterative_theta",
                   "V8_FIXTURE_ROPE", "fixture_rope")
rope["dtypes"]["positions"] = "i32"
rope["layout"]["positions"] = "contiguous"
MAPS["rope"] = rope
kv_store = call_map("fixture.kv_store", "kv_store", ["prefill", "decode"],
                    {"input": "f32", "cache": "f16", "output": "f16"},
                    {"input": "token_major", "cache": "head_major_strided", "output": "head_major_strided"},
                    [("kv_store_f16_round_nearest_even", "V8_FIXTURE_KV_STORE")], [("serial", "none")],
                    ELT_ABI, "fixture_kv_store")
kv_store["threading"] = {"runtime": "serial", "work_partitions": [{"kind": "serial", "reduction_order_effect": "none"}]}
del kv_store["functions"]["threadpool"]
MAPS["kv_store"] = kv_store

if __name__ == "__main__":
    for name, kmap in MAPS.items():
        (HERE / f"{name}.kmap.json").write_text(json.dumps(kmap, indent=2) + "\n")
