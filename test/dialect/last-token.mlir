// RUN: V8_ROUNDTRIP
// RUN: V8_GENERIC_ROUNDTRIP

// A prefill's last token row: a [T, ...] activation as a [1, ...] one.
func.func @last(%h: tensor<7x64xf32>) -> tensor<1x64xf32> {
  %l = v8.last_token %h : tensor<7x64xf32> -> tensor<1x64xf32>
  func.return %l : tensor<1x64xf32>
}
// CHECK: v8.last_token %{{.*}} : tensor<7x64xf32> -> tensor<1x64xf32>
// GENERIC: "v8.last_token"(%{{.*}}) : (tensor<7x64xf32>) -> tensor<1x64xf32>
