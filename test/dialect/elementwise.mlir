// RUN: V8_ROUNDTRIP
// RUN: V8_GENERIC_ROUNDTRIP

func.func @mlp(%ids: tensor<3xi32>, %table: tensor<1000x64xf32>, %g: tensor<3x64xf32>) -> tensor<3x64xf32> {
  %e = v8.embedding "tok_embd" prefill %ids, %table contract #v8.op_contract<"embedding_fp32_row_copy", op = embedding, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = row_copy, transcendentals = none, rounding_points = [exact_copy], partition = #v8.partition<independent_rows, effect = none>> : (tensor<3xi32>, tensor<1000x64xf32>) -> tensor<3x64xf32>
  %s = v8.swiglu "act" prefill %g, %e contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<3x64xf32>, tensor<3x64xf32>) -> tensor<3x64xf32>
  %t = v8.geglu "act_gelu" prefill %g, %s contract #v8.op_contract<"geglu_fp32_tanh", op = geglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = gelu_tanh_times_up, transcendentals = tanhf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<3x64xf32>, tensor<3x64xf32>) -> tensor<3x64xf32>
  %r = v8.residual_add "res" prefill %t, %e contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<3x64xf32>, tensor<3x64xf32>) -> tensor<3x64xf32>
  %v = v8.reshape %r : tensor<3x64xf32> -> tensor<3x4x16xf32>
  %b = v8.reshape %v : tensor<3x4x16xf32> -> tensor<3x64xf32>
  func.return %b : tensor<3x64xf32>
}
// CHECK: v8.embedding "tok_embd" prefill %{{.*}}, %{{.*}} contract #v8.op_contract<"embedding_fp32_row_copy", op = embedding, {{.*}} elementwise = row_copy, transcendentals = none, rounding_points = [exact_copy]
// CHECK: v8.swiglu "act" prefill %{{.*}}, %{{.*}} contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, {{.*}} elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>>
// CHECK: v8.geglu "act_gelu" prefill {{.*}} elementwise = gelu_tanh_times_up, transcendentals = tanhf
// CHECK: v8.residual_add "res" prefill {{.*}} elementwise = add
// CHECK: v8.reshape %{{.*}} : tensor<3x64xf32> -> tensor<3x4x16xf32>
// GENERIC: "v8.swiglu"(%{{.*}}, %{{.*}}) <{node = "act", phase = #v8<phase prefill>, contract = #v8.op_contract<"swiglu_fp32_expf"
