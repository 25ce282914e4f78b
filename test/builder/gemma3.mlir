// Gemma3: five sliding-window layers per global one (local RoPE base 10000, global 1e6), post-norms,
// GeGLU, the sqrt(hidden) embedding scale on the table argument and always-tied logits.  The KV
// cache is full-size (the default capacity is not capped at the window): the local layers'
// attention carries the window, the global layers' does not.
// RUN: %python %S/../Inputs/circuits/tiny_gguf.py gemma3 %t.gguf
// RUN: v8-build %t.gguf --circuit gemma3 | v8-opt --resolve-contracts | filecheck %s

// CHECK: kv_capacity = 4096 : i64
// CHECK-LABEL: func.func @prefill(%tokens: tensor<16xi32> {v8.token_axis = 0 : i64}, %token_embd.weight: tensor<512x256xf32> {v8.tensor = "token_embd.weight", v8.weight_scale = 1.600000e+01 : f32}
// CHECK: v8.rope "blk.0.rope_q" prefill {{.*}} base 1.000000e+04
// CHECK: v8.scale "blk.0.q_scale" prefill %q_rot by 1.250000e-01
// CHECK: v8.attention "blk.0.attn" prefill causal window 512 %q_scaled, {{.*}} scale 1.000000e+00
// CHECK: v8.rmsnorm "blk.0.post_attention_norm" prefill
// CHECK: v8.geglu "blk.0.ffn_act" prefill {{.*}} #v8.op_contract<"geglu_fp32_ggml_fp16_table"
// CHECK: v8.rmsnorm "blk.0.post_ffw_norm" prefill
// CHECK: v8.rope "blk.5.rope_q" prefill {{.*}} base 1.000000e+06
// CHECK: v8.attention "blk.5.attn" prefill causal %q_scaled_5,
// CHECK: v8.logits "output" prefill %final, %token_embd.weight_1 contract
