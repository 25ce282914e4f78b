// Manifest/circuit conflicts are errors with exit code 1 and a located message, never a traceback.
// RUN: %python %S/../Inputs/circuits/tiny_gguf.py qwen3 %t.gguf --drop blk.0.attn_k_norm.weight
// RUN: not v8-build %t.gguf --circuit qwen3 2>&1 | filecheck %s --check-prefix=QKNORM
// QKNORM: {{.*}}.gguf: error: the model has no tensor 'blk.0.attn_k_norm.weight' (required by 'attn_k_norm' at circuits/qwen3.json:{{[0-9]+}}:5)
// QKNORM-NOT: Traceback

// RUN: %python %S/../Inputs/circuits/tiny_gguf.py qwen3 %t.heads.gguf --set qwen3.attention.head_count_kv=3
// RUN: not v8-build %t.heads.gguf --circuit qwen3 2>&1 | filecheck %s --check-prefix=HEADS
// HEADS: error: head_count 4 is not a multiple of head_count_kv 3 (grouped-query attention needs H % Hkv == 0)

// RUN: %python %S/../Inputs/circuits/tiny_gguf.py qwen2 %t.qwen2.gguf
// RUN: not v8-build %t.qwen2.gguf --circuit qwen3 2>&1 | filecheck %s --check-prefix=ARCH
// ARCH: error: architecture 'qwen2' is not one that circuits/qwen3.json builds (qwen3)

// RUN: not v8-build %t.gguf --circuit qwen3vl_vision 2>&1 | filecheck %s --check-prefix=VISION
// VISION: error: architecture 'qwen3' is not one that circuits/qwen3vl_vision.json builds (clip)
// VISION-NOT: requirement(s) cannot be met yet

// RUN: %python %S/../Inputs/circuits/tiny_gguf.py gemma3 %t.gemma.gguf --set gemma3.attention.sliding_window=0
// RUN: not v8-build %t.gemma.gguf --circuit gemma3 2>&1 | filecheck %s --check-prefix=WINDOW
// WINDOW: error: manifest value 'sliding_window' = 0 must be a positive integer (required by 'attn' at circuits/gemma3.json:{{[0-9]+}}:5)
