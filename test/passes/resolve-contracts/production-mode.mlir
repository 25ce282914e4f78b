// Production mode refuses any requirement, contract or provider that is not validated, and says
// which; bringup mode resolves the same op and records the gaps as blockers.
// RUN: v8-opt -p 'resolve-contracts{mode="production" registry="%S/../../Inputs/validated/contracts.json" kernel-maps="%S/../../Inputs/validated/maps"}' --verify-diagnostics --split-input-file %s | filecheck %s
// RUN: v8-opt -p 'resolve-contracts{registry="%S/../../Inputs/validated/contracts.json" kernel-maps="%S/../../Inputs/validated/maps"}' --split-input-file %s | filecheck %s --check-prefix=BRINGUP
// RUN: not v8-opt --resolve-contracts='mode="production" kernel-maps="%fixture_maps"' %s --split-input-file 2>&1 | filecheck %s --check-prefix=CLI

// Validated requirement, contract and provider: production resolves.
func.func @ok(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> requirement #v8.requirement<"circuits/test.json", status = validated> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: v8.residual_add "res" decode {{.*}} resolved #v8.resolved<kernel = "validated_fixture.residual_add", {{.*}} blockers = []>
// BRINGUP: resolved #v8.resolved<kernel = "validated_fixture.residual_add", {{.*}} blockers = []>
// CLI: production-mode.mlir:9:3: error: 'v8.residual_add' "res": production mode refuses: {{.*}}provider 'fixture.residual_add' is 'unresolved'

// -----

// Unvalidated contract and provider, requirement without circuit provenance.
func.func @gaps(%g: tensor<1x64xf32>, %u: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %s = v8.swiglu "act" decode %g, %u contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %s : tensor<1x64xf32>
}
// CHECK: production-mode.mlir:[[# @LINE - 3]]:3: error: 'v8.swiglu' "act": production mode refuses: the op has no circuit requirement; contract 'swiglu_fp32_expf' is 'unresolved'; provider 'validated_fixture.swiglu' is 'unresolved'
// BRINGUP: resolved #v8.resolved<kernel = "validated_fixture.swiglu", {{.*}} blockers = [requirement_missing, contract_not_validated, provider_not_validated]>

// -----

func.func @observed(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> requirement #v8.requirement<"circuits/test.json", status = observed> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: production-mode.mlir:[[# @LINE - 3]]:3: error: 'v8.residual_add' "res": production mode refuses: requirement from 'circuits/test.json' is 'observed'
// BRINGUP: blockers = [requirement_not_validated]
