"""Closed vocabularies: every value a contract, partition or kernel map may use.

Registries (JSON), kernel maps and the IR attributes all validate against these
tables, so a value is legal in one place exactly when it is legal in all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Bare words that name a storage type or a mood, never a complete arithmetic.
LOOSE_IDS = frozenset({"fp16", "f16", "bf16", "fp32", "f32", "fast", "strict", "auto", "default"})

STATUSES = ("unresolved", "observed", "validated")
PHASES = ("prefill", "decode")
REDUCTION_ORDER_EFFECTS = ("none", "contract_defined")

CONTRACT_ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")

# ---- attention reductions ------------------------------------------------

PRECISIONS = ("fp32", "fp16_rounded", "fp16_rounded_on_tile_load", "bf16_rounded")

ATTENTION_FIELDS: Mapping[str, tuple[str, ...]] = {
    "q_compute": PRECISIONS,
    "k_compute": PRECISIONS,
    "score_accumulator": ("fp32", "isa_lane_tree"),
    "dot_order": (
        "isa_lane_tree_named_by_provider",
        "fp32_8_lanes_fma_halving_tree",
        "fma_chain_ascending",
        "unpinned_gemm",
        "fp32_lanes_isa_width_x4_fp64_tail",
    ),
    "scale_application": ("score_times_scale", "unit_scale", "q_and_k_times_sqrt_scale"),
    "softmax_statistics": (
        "fp32_online_fma_sum_update",
        "fp32_per_key_tile_fp64_sum_update",
        "fp32_full_row",
        "fp32_full_row_fp64_sum",
    ),
    "exp_function": (
        "libm_expf",
        "ggml_avx512_vector_expf_libm_rescale",
        "ggml_avx2_vector_expf_libm_rescale",
        "ggml_avx512_vector_expf",
        "unpinned_vector_exp",
    ),
    "probability_rounding": ("none", "fp16"),
    "value_compute": PRECISIONS,
    "value_accumulator": ("fp32", "fp16_rounded_each_update"),
    "partial_storage": ("none", "fp16", "fp32"),
    "partial_merge": ("none", "fp32_ascending_skip_empty", "per_key_tile_ascending"),
    "normalization": ("reciprocal_then_multiply", "divide"),
    "output_rounding": ("none", "bf16"),
}

# ---- quantized linear ----------------------------------------------------

LINEAR_FIELDS: Mapping[str, tuple[str, ...]] = {
    "weight_format": ("q4_k", "q6_k", "q8_0", "q5_0", "q4_0", "q4_1", "q5_1", "q5_k"),
    "activation_format": ("q8_k", "q8_0", "q8_1"),
    "activation_quantizer": (
        "q8_k_reference_round_half_even",
        "q8_0_x86_simd_round_half_even",
        "q8_1_x86_simd_round_half_even_fp16_sum",
        "q8_k_4_row_interleaved_round_half_even_sign_equivalent",
    ),
    "integer_accumulator": (
        "int32_per_32_group_times_6bit_scale",
        "int32_per_16_group_times_int8_scale_offset_by_bsums",
        "int32_4_element_lanes_per_32_block",
        "int32_per_super_block_6bit_scale_times_32_group_dot",
        "int32_per_super_block_int8_scale_times_16_group_dot_offset_by_bsums",
        "int32_per_64_element_pair_of_groups_6bit_scale_times_32_group_dot",
        "int32_per_32_block_exact_dot",
    ),
    "float_accumulator": (
        "fp32_8_lanes_fma",
        "fp32_8_lanes_fma_block_factor_fp16_product",
        "fp32_one_chain_per_output_fma_super_block_value_times_activation_d",
        "fp32_chain_per_output_fma_super_block_int_times_rounded_d_times_activation_d",
        "fp32_chain_per_output_fma_64_element_int_in_4_row_groups_super_block_int_in_tail_rows",
        "fp32_chain_per_output_fma_block_int_times_fp16_product",
    ),
    "min_correction": (
        "none",
        "bsums_fp32_4_lanes_times_neg_dmin",
        "int32_32_times_scale_bsums",
        "int32_mins_bsums_fp32_fnmadd_dmin_per_super_block",
        "bsums_fp32_scalar_fma_sum_times_neg_dmin_after_tree",
        "fp32_scalar_fma_sum_of_fp16_m_times_fp16_s_after_tree",
        "int32_mins_bsums_own_fp32_fma_chain_rounded_dmin_times_activation_d_subtracted_at_end",
    ),
    "super_block_order": ("ascending",),
    "horizontal_order": ("x86_lane_tree_of_isa", "none_exact_int32_lane_sums"),
    "bias": ("none", "after_complete_dot"),
    "partial_accumulator": ("none", "fp32"),
    "merge_order": ("none", "ascending"),
}

# ---- other decoder ops ---------------------------------------------------

DECODER_OPS = (
    "rmsnorm",
    "qk_norm",
    "rope",
    "swiglu",
    "geglu",
    "residual_add",
    "embedding",
    "linear",
    "logits",
    "recurrent",
    "kv_store",
    "head_split",
    "sigmoid_gate",
    "layer_norm",
    "gelu",
    "patch_merge",
    "scale",
)

OP_FIELDS: Mapping[str, tuple[str, ...]] = {
    "storage": ("fp32", "fp16", "bf16", "q8_0", "q5_0", "q4_0", "q4_1", "q5_1", "q4_k", "q5_k",
                "q6_k"),
    "compute": ("fp32",),
    "reduction_kind": ("none", "sum_of_squares", "dot", "mean_and_centered_sum_of_squares"),
    "reduction_accumulator": ("none", "fp32", "fp64"),
    "reduction_order": ("none", "ascending", "ggml_mul_mat_16_lane_sgemm_or_vec_dot",
                        "ggml_mul_mat_16_lane_sgemm_or_vec_dot_4_lane_tail",
                        "ggml_vec_dot_64_lane", "ggml_vec_dot_64_lane_4_lane_tail",
                        "ggml_mul_mat_f16_16_lane_sgemm_or_vec_dot_fp64_tail",
                        "ggml_mul_mat_bf16_dpbf16_sgemm_or_vec_dot_fp64_tail",
                        "ggml_mul_mat_8_lane_sgemm_or_vec_dot_hadd",
                        "ggml_mul_mat_f16_8_lane_sgemm_or_vec_dot_hadd_fp64_tail",
                        "ggml_mul_mat_bf16_8_lane_sgemm_or_vec_dot_fp64_tail",
                        "ggml_vec_dot_32_lane_hadd"),
    "elementwise": (
        "none",
        "scale_then_weight",
        "rotate_neox_pairs",
        "rotate_adjacent_pairs",
        "rotate_multi_section",
        "silu_expf_times_up",
        "gelu_tanh_times_up",
        "add",
        "row_copy",
        "bias_after_dot",
        "convert_to_cache",
        "rotate_interleaved_multi_section",
        "split_heads_copy",
        "times_sigmoid_expf",
        "gated_delta_rule_state_update",
        "center_scale_weight_bias",
        "gelu_tanh",
        "rotate_vision_sections",
        "concat_rows_copy",
        "silu_ggml_vexp_row_blocks_times_up",
        "gelu_fp16_table_clamped_times_up",
        "gated_delta_rule_ggml_fma_update",
        "ggml_dequantize_row",
        "ggml_dequantize_row_times_scale",
        "times_scale",
    ),
    "transcendentals": (
        "none",
        "sqrtf",
        "cosf_sinf_iterative_theta",
        "expf",
        "tanhf",
        "expf_logf_sqrtf",
        "ggml_vexpf_isa_blocks_expf_tail",
        "tanhf_fp16_table",
        "ggml_vexpf_16_lane_blocks_expf_logf_sqrtf",
        "ggml_vexpf_8_lane_blocks_expf_logf_sqrtf",
    ),
}

ROUNDING_POINTS = (
    "fp32_each_multiply",
    "fp32_each_add",
    "fp32_fused_multiply_add",
    "fp64_accumulate",
    "fp32_mean",
    "fp32_scale",
    "fp32_scaled_value",
    "fp32_weighted_value",
    "fp32_theta_each_step",
    "fp32_rotation",
    "fp32_activation",
    "fp32_output",
    "exact_copy",
    "fp16_round_nearest_even",
    "fp32_conv_each_tap",
    "fp32_conv_rounded_products",
    "fp64_norm_sums",
    "fp32_state_decay",
    "fp32_state_update",
    "fp32_dot_each_product_and_sum",
    "fp32_gated_output",
    "fp32_centered_value",
    "fp32_variance",
    "fp32_biased_value",
    "fp16_table_lookup",
    "bf16_round_nearest_even",
    "fp32_dpbf16_pair_subnormals_flushed",
)

# ---- partitions ----------------------------------------------------------

# kind -> (reduction-order effect it must declare, parameters it takes)
PARTITION_KINDS: Mapping[str, tuple[str, frozenset[str]]] = {
    "serial": ("none", frozenset()),
    "single_range": ("none", frozenset()),
    "padded_single_range": ("none", frozenset({"pad_multiple"})),
    "independent_rows": ("none", frozenset()),
    "independent_columns": ("none", frozenset()),
    "output_tiles": ("none", frozenset()),
    "independent_heads": ("none", frozenset()),
    "independent_query_blocks": ("none", frozenset()),
    "independent_elements": ("none", frozenset()),
    "query_key_tiles": ("none", frozenset({"query_tile", "key_tile"})),
    "kv_chunks_by_workers": (
        "contract_defined",
        frozenset({"threshold", "extent_multiple", "chunks"}),
    ),
    "split_k": ("contract_defined", frozenset({"chunks", "unit"})),
}

# Parameters whose value is a word rather than a number.
PARTITION_WORD_PARAMS: Mapping[str, tuple[str, ...]] = {
    "chunks": ("workers",),
    "unit": ("super_block",),
}

# Partitions a kernel map's threading may declare (an execution, not arithmetic).
WORK_PARTITIONS = (
    "serial",
    "independent_rows",
    "independent_columns",
    "output_tiles",
    "independent_heads",
    "independent_query_blocks",
    "kv_chunks_by_workers",
    "split_k",
)

# ---- composites ----------------------------------------------------------

COMPOSITE_SELECTORS = ("query_batch",)

# ---- kernel maps ---------------------------------------------------------

KERNEL_OPS = ("attention",) + DECODER_OPS
DTYPES = ("f32", "f16", "bf16", "q4_k", "q5_k", "q6_k", "q8_k", "q8_0", "q5_0", "q4_0", "q4_1", "q5_1",
          "i32")
# Weight layouts v8 makes once at load time from the file's rows (a kernel map reading one
# declares the preparation function): layout -> (stored dtype, rows per group, bytes per group
# and 256-element super-block).  The row count is padded to whole groups.
PREPARED_LAYOUTS: dict[str, tuple[str, int, int]] = {
    "q4_k_x16": ("q4_k", 16, 2368),   # v8_block_q4_kx16, quant_repacked/v8_quant_repacked_x16.h
    "q6_k_x16": ("q6_k", 16, 3360),   # v8_block_q6_kx16
}
LAYOUTS = ("contiguous", "row_blocks", "head_major_strided", "token_major", "head_major",
           *PREPARED_LAYOUTS)


def prepared_bytes(layout: str, n: int, k: int) -> int:
    """Bytes of an n x k weight in a prepared layout (whole row groups, whole super-blocks)."""
    _, rows, group_bytes = PREPARED_LAYOUTS[layout]
    return (n + rows - 1) // rows * (k // 256) * group_bytes
ISA_DISPATCH_KINDS = ("runtime", "compile_time", "scalar")
ISA_VARIANTS = ("avx512", "avx2", "scalar")
THREADING_RUNTIMES = ("serial", "threadpool")
ABI_ROLES = ("selector", "input", "output", "weight", "kv_cache", "scratch", "dim", "param")
EMISSIONS = ("call", "inline")
MAP_CONSTRAINTS = ("k_multiple_of", "head_dim_multiple_of", "max_head_dim")


def loose_id_problem(contract_id: str) -> str | None:
    """Why an id is not a complete contract name, or None when it is acceptable."""
    if contract_id.lower() in LOOSE_IDS:
        return (
            f"'{contract_id}' is a loose name, not a contract: name the complete arithmetic "
            "(e.g. 'f16_online_fp32_merge')"
        )
    if not CONTRACT_ID_PATTERN.match(contract_id):
        return (
            f"'{contract_id}' is not a contract id: use lower_snake_case words "
            "naming the arithmetic"
        )
    return None


def expected_effect(partition_kind: str) -> str:
    return PARTITION_KINDS[partition_kind][0]

# Why an op is not production-ready; recorded in #v8.resolved in bringup mode.
BLOCKERS = (
    "contract_not_validated",
    "contract_part_not_validated",
    "provider_not_validated",
    "requirement_not_validated",
    "requirement_missing",
)

