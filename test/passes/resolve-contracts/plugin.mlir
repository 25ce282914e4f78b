// The dialect and passes load into plain xdsl-opt through the xdsl.universe entry point.
// RUN: xdsl-opt -p 'resolve-contracts{kernel-maps="%fixture_maps"}' %s | filecheck %s

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = v8.residual_add "res" decode %x, %y contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %r : tensor<1x64xf32>
}
// CHECK: v8.resolution_ledger = {"decode::res" = #v8.resolved<kernel = "fixture.residual_add"
// CHECK: v8.residual_add "res" decode {{.*}} resolved #v8.resolved<kernel = "fixture.residual_add"
