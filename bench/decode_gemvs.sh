#!/bin/sh
# Build and run bench/decode_gemvs.c with the runtime's own flags (no -march).
#   sh bench/decode_gemvs.sh [threads] [rounds] [native|avx2|avx512]
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
rc=$here/runtime_c
out=${TMPDIR:-/tmp}/decode_gemvs
echo "building $out ..." >&2
gcc -O2 -std=c11 -Wall -Wextra -Werror -I"$rc/include" -I"$rc" -I"$here/bench" -o "$out" \
    "$here/bench/decode_gemvs.c" "$here/bench/stream_read.c" \
    "$rc/core/status.c" "$rc/core/fp16.c" "$rc/core/cpu.c" "$rc/core/expf.c" "$rc/core/threadpool.c" \
    "$rc/quant/q_formats.c" "$rc/quant/q_dot_ref.c" "$rc/quant/q_linear.c" \
    "$rc/quant_repacked/qr_linear.c" "$rc/quant_repacked/qr_x16.c" -lm -lpthread
echo "repacking 28 layers of weights, then timing ..." >&2
exec "$out" "$@"
