#!/bin/sh
# Build and run bench/gemv_x16_ab.c with the runtime's own flags (no -march).
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
rc=$here/runtime_c
out=${TMPDIR:-/tmp}/gemv_x16_ab
gcc -O2 -std=c11 -Wall -Wextra -Werror -I"$rc/include" -I"$rc" -I"$here/bench" -o "$out" "$here/bench/gemv_x16_ab.c" "$here/bench/stream_read.c" \
    "$rc/core/status.c" "$rc/core/fp16.c" "$rc/core/cpu.c" "$rc/core/expf.c" "$rc/core/threadpool.c" \
    "$rc/quant/q_formats.c" "$rc/quant/q_dot_ref.c" "$rc/quant/q_linear.c" \
    "$rc/quant_repacked/qr_linear.c" "$rc/quant_repacked/qr_x16.c" -lm -lpthread
exec "$out" "$@"
