// A scaled-rows embedding contract (the row dequantized, then times one fp32 scale) carries
// its scale on the op; the scale without such a contract, or such a contract without the
// scale, is refused.
// RUN: v8-opt %s --verify-diagnostics --split-input-file | filecheck %s

func.func @f(%ids: tensor<3xi32>, %table: tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32> {
  %e = v8.embedding "token_embd" prefill %ids, %table scale 33.9411201 contract #v8.op_contract<"embedding_q6_k_ggml_dequantize_row_fp32_scale", op = embedding, storage = q6_k, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = ggml_dequantize_row_times_scale, transcendentals = none, rounding_points = [fp32_each_multiply, fp32_scale], partition = #v8.partition<independent_rows, effect = none>> : (tensor<3xi32>, tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32>
  func.return %e : tensor<3x1152xf32>
}
// CHECK: v8.embedding "token_embd" prefill %{{.*}}, %{{.*}} scale 33.9411201 contract #v8.op_contract<"embedding_q6_k_ggml_dequantize_row_fp32_scale", {{.*}} elementwise = ggml_dequantize_row_times_scale, {{.*}} rounding_points = [fp32_each_multiply, fp32_scale]

// -----

func.func @f(%ids: tensor<3xi32>, %table: tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32> {
  %e = v8.embedding "token_embd" prefill %ids, %table contract #v8.op_contract<"embedding_q6_k_ggml_dequantize_row_fp32_scale", op = embedding, storage = q6_k, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = ggml_dequantize_row_times_scale, transcendentals = none, rounding_points = [fp32_each_multiply, fp32_scale], partition = #v8.partition<independent_rows, effect = none>> : (tensor<3xi32>, tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32>
  func.return %e : tensor<3x1152xf32>
}
// CHECK: embedding-scaled.mlir:[[# @LINE - 3]]:3: error: 'v8.embedding' "token_embd": contract 'embedding_q6_k_ggml_dequantize_row_fp32_scale' multiplies the rows by a scale; the op needs `scale`

// -----

func.func @f(%ids: tensor<3xi32>, %table: tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32> {
  %e = v8.embedding "token_embd" prefill %ids, %table scale 33.9411201 contract #v8.op_contract<"embedding_q6_k_ggml_dequantize_row", op = embedding, storage = q6_k, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = ggml_dequantize_row, transcendentals = none, rounding_points = [fp32_each_multiply], partition = #v8.partition<independent_rows, effect = none>> : (tensor<3xi32>, tensor<512x1152x!v8.q6_k>) -> tensor<3x1152xf32>
  func.return %e : tensor<3x1152xf32>
}
// CHECK: embedding-scaled.mlir:[[# @LINE - 3]]:3: error: 'v8.embedding' "token_embd": contract 'embedding_q6_k_ggml_dequantize_row' applies no scale; the op's `scale` would be ignored
