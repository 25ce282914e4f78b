// After resolution no stage may change what the ledger pinned. Each RUN changes one fact mid-pipeline
// with the test-only pass and checks that the next stage fails naming itself, the op's location and
// the old and new values — and that no C is printed.
// RUN: not v8-opt --resolve-contracts --test-corrupt-resolution='node="decode::proj" field="kernel" value="q6_k_x_q8_k_gemv"' --lower-to-kernels %s 2>&1 | filecheck %s --check-prefix=KERNEL
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --test-corrupt-resolution='node="decode::proj" field="production" value="v8_q4_k_gemv_ref"' --prepare-calls %s 2>&1 | filecheck %s --check-prefix=FUNCTION
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --prepare-calls --test-corrupt-resolution='node="decode::proj" field="selector" value="V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER"' -t c %s 2>&1 | filecheck %s --check-prefix=SELECTOR
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --prepare-calls --test-corrupt-resolution='node="decode::proj" field="callee" value="v8_q4_k_gemv_ref"' -t c %s 2>&1 | filecheck %s --check-prefix=CALLEE
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --prepare-calls --test-corrupt-resolution='node="decode::proj" field="selector-arg" value="V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER"' -t c %s 2>&1 | filecheck %s --check-prefix=SELECTORARG
// A resolution whose functions its kernel map does not bind (ledger and op agree, the map does not).
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --test-corrupt-resolution='node="decode::proj" field="production" value="v8_q4_k_gemv_ref" ledger=true' --prepare-calls %s 2>&1 | filecheck %s --check-prefix=MAP
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --prepare-calls --test-corrupt-resolution='node="decode::proj" field="kernel" value="x"' -t c %s 2>&1 | filecheck %s --check-prefix=NOC
// With -o, a failed run leaves no file behind.
// RUN: rm -f %t.c
// RUN: not v8-opt --resolve-contracts --lower-to-kernels --prepare-calls --test-corrupt-resolution='node="decode::proj" field="kernel" value="x"' -t c %s -o %t.c
// RUN: %python -c "import os, sys; sys.exit(os.path.exists(sys.argv[1]))" %t.c

func.func @decode(%x: tensor<1x1024xf32>, %norm: tensor<1024xf32>, %w: tensor<1024x1024x!v8.q4_k>, %g: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %h = v8.rmsnorm "norm" decode %x, %norm eps 1.000000e-06 contract #v8.op_contract<"rmsnorm_fp32_fp64_sum_ascending", op = rmsnorm, storage = fp32, compute = fp32, reduction_kind = sum_of_squares, reduction_accumulator = fp64, reduction_order = ascending, elementwise = scale_then_weight, transcendentals = sqrtf, rounding_points = [fp32_each_multiply, fp64_accumulate, fp32_mean, fp32_scale, fp32_scaled_value, fp32_weighted_value], partition = #v8.partition<independent_rows, effect = none>> : (tensor<1x1024xf32>, tensor<1024xf32>) -> tensor<1x1024xf32>
  %y = v8.linear "proj" decode %h, %w contract #v8.linear_contract<"q4_k_x_q8_k_fp32_block_order", weight_format = q4_k, activation_format = q8_k, activation_quantizer = q8_k_reference_round_half_even, integer_accumulator = int32_per_32_group_times_6bit_scale, float_accumulator = fp32_8_lanes_fma, min_correction = bsums_fp32_4_lanes_times_neg_dmin, super_block_order = ascending, horizontal_order = x86_lane_tree_of_isa, bias = after_complete_dot, partial_accumulator = none, merge_order = none, partition = #v8.partition<independent_rows, effect = none>> execution #v8.exec_requirement<runtime = threadpool, partition = independent_rows> : (tensor<1x1024xf32>, tensor<1024x1024x!v8.q4_k>) -> tensor<1x1024xf32>
  %r = v8.residual_add "res" decode %y, %x contract #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  %s = v8.swiglu "act" decode %g, %r contract #v8.op_contract<"swiglu_fp32_expf", op = swiglu, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = silu_expf_times_up, transcendentals = expf, rounding_points = [fp32_activation, fp32_output], partition = #v8.partition<independent_elements, effect = none>> : (tensor<1x1024xf32>, tensor<1x1024xf32>) -> tensor<1x1024xf32>
  func.return %s : tensor<1x1024xf32>
}
// KERNEL: pinning.mlir:19:3: error: 'v8.linear' "proj": lower-to-kernels: resolution of 'decode::proj' changed: kernel: 'q4_k_x_q8_k_gemv' -> 'q6_k_x_q8_k_gemv'
// FUNCTION: pinning.mlir:19:3: error: 'v8.kernel' "proj": prepare-calls: resolution of 'decode::proj' changed: production: 'v8_q4_k_gemv' -> 'v8_q4_k_gemv_ref'
// SELECTOR: pinning.mlir:19:3: error: 'v8.call' "proj": emit-c: resolution of 'decode::proj' changed: selector: 'V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER' -> 'V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER'
// CALLEE: pinning.mlir:19:3: error: 'v8.call' "proj": emit-c: calls 'v8_q4_k_gemv_ref' but the resolution binds 'v8_q4_k_gemv_parallel_dispatch'
// SELECTORARG: pinning.mlir:19:3: error: 'v8.call' "proj": emit-c: passes selector ['V8_QL_Q6_K_X_Q8_K_FP32_BLOCK_ORDER'] but the resolved contract's selector is 'V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER'
// MAP: pinning.mlir:19:3: error: 'v8.kernel' "proj": prepare-calls: kernel map 'q4_k_x_q8_k_gemv' binds production 'v8_q4_k_gemv' but the resolution pinned 'v8_q4_k_gemv_ref'
// NOC-NOT: v8_status decode(
// NOC: error: 'v8.call' "proj": emit-c: resolution of 'decode::proj' changed: kernel: 'q4_k_x_q8_k_gemv' -> 'x'
// NOC-NOT: v8_status decode(
