// Nodes are the ledger's keys: a name used twice in a function is an error, and an op already
// resolved to another provider is never silently re-resolved.
// RUN: v8-opt --resolve-contracts='kernel-maps="%fixture_maps"' --verify-diagnostics --split-input-file %s | filecheck %s

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %s = v8.residual_add "res" decode %r, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %s : tensor<1x64xf32>
}
// CHECK: node-identity.mlir:7:3: error: 'v8.residual_add' "res": node name 'decode::res' is used twice in one function

// -----

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> resolved #v8.resolved<kernel = "some.other.kernel", contract = "residual_add_fp32", selector = "X", emission = inline, oracle = "", production = "", threadpool = "", execution = #v8.execution<isa_dispatch = scalar, isa_variants = [scalar], runtime = serial, partition = serial, reduction_order_effect = none>, blockers = []> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: error: 'v8.residual_add' "res": was already resolved to 'some.other.kernel' and now resolves to 'fixture.residual_add': a resolution never changes
