// RUN: v8-opt %s --allow-unregistered-dialect --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s
// RUN: not v8-opt %s --allow-unregistered-dialect 2>&1 | filecheck %s --check-prefix=CLI

// A bare storage word is not a contract.
"test.op"() {c = #v8.op_contract<"fp16", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: invalid-attributes.mlir:5:33
// CHECK: 'fp16' is a loose name, not a contract: name the complete arithmetic
// CLI: invalid-attributes.mlir:5:33: error: 'fp16' is a loose name, not a contract: name the complete arithmetic (e.g. 'f16_online_fp32_merge')
// CLI-NEXT: "test.op"() {c = #v8.op_contract<"fp16", op = residual_add,

// -----

// Case does not make a loose word a contract either.
"test.op"() {c = #v8.op_contract<"STRICT", op = residual_add, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: 'STRICT' is a loose name, not a contract

// -----

"test.op"() {c = #v8.op_contract<"residual_add_fp32", op = residual_add, precision = fp32, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: invalid-attributes.mlir:[[# @LINE - 1]]:74
// CHECK: unknown field 'precision' in #v8.op_contract (fields: op, storage, compute,

// -----

"test.op"() {c = #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, storage = fp32, compute = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: duplicate field 'storage' in #v8.op_contract

// -----

"test.op"() {c = #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: #v8.op_contract is missing field 'compute'

// -----

"test.op"() {c = #v8.op_contract<"residual_add_fp32", op = residual_add, storage = fp32, compute = fp8, reduction_kind = none, reduction_accumulator = none, reduction_order = none, elementwise = add, transcendentals = none, rounding_points = [fp32_output], partition = #v8.partition<independent_elements, effect = none>>} : () -> ()
// CHECK: invalid-attributes.mlir:[[# @LINE - 1]]:100
// CHECK: compute = fp8 is not one of: fp32

// -----

// An independent-outputs partition cannot claim a reduction-order effect.
"test.op"() {p = #v8.partition<independent_rows, effect = contract_defined>} : () -> ()
// CHECK: partition 'independent_rows' must declare effect = none, not contract_defined

// -----

// Split-KV names its threshold, extent rounding and chunk count, or it is not a contract.
"test.op"() {p = #v8.partition<kv_chunks_by_workers, effect = contract_defined, chunks = workers, threshold = 512>} : () -> ()
// CHECK: partition 'kv_chunks_by_workers' parameters: missing 'extent_multiple'

// -----

"test.op"() {p = #v8.partition<split_k, effect = contract_defined, chunks = some, unit = super_block>} : () -> ()
// CHECK: partition parameter chunks must be one of: workers

// -----

"test.op"() {e = #v8.execution<isa_dispatch = runtime, isa_variants = [avx512, sse2], runtime = threadpool, partition = independent_rows, reduction_order_effect = none>} : () -> ()
// CHECK: isa_variants = sse2 is not one of: avx512, avx2, scalar
