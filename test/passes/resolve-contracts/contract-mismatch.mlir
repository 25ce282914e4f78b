// The IR states a contract in full; a field that disagrees with the registry is refused, and an id
// the registry does not know is unknown (not guessed).
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' --verify-diagnostics --split-input-file %s | filecheck %s

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_activation], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: contract-mismatch.mlir:6:3: error: 'v8.residual_add' "res": contract 'residual_add_fp32' in the IR differs from the registry ({{.*}}decoder_ops.json: $.contracts[{{[0-9]+}}]): rounding_points: [fp32_activation] vs [fp32_output]

// -----

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32_kahan", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: contract-mismatch.mlir:[[# @LINE - 3]]:3: error: 'v8.residual_add' "res": unknown contract 'residual_add_fp32_kahan': not in the registry ({{.*}}attention.json, {{.*}}decoder_ops.json, {{.*}}quantized_linear.json{{.*}})
