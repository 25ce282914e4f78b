#!/bin/sh
# Build llama.cpp -- the release llama-cpp-python 0.3.36 vendors, the one .ci/run installs --
# for AVX2 + FMA + F16C only (no AVX-512), as it runs on an AVX2-only host.  The parity tests
# run v8-parity against it (V8_LLAMACPP_AVX2_LIB, which the Makefile sets when it is built):
# v8 then derives ggml_build avx2 and holds its kernels to AVX2, so the AVX2 variant's bits
# are checked on any x86 host; `bench/model_vs_llamacpp.py --cpu-mask avx2` times it.
# llama_cpp loads it through LLAMA_CPP_LIB_PATH.
#   sh test/e2e/llamacpp_avx2.sh        -> build/llamacpp-avx2/cmake/bin/libllama.so
# A few minutes on 2 cores the first time (libllama and ggml only); a finished build is kept.
set -e
here=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
out=$here/build/llamacpp-avx2
lib=$out/cmake/bin
if [ -f "$lib/libllama.so" ]; then
    echo "llama.cpp AVX2 build: $lib (kept; remove $out to rebuild)" >&2
    exit 0
fi
mkdir -p "$out/src"
echo "llama.cpp AVX2: fetching the llama-cpp-python 0.3.36 sources ..." >&2
"$python" -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$out/src"
tar -xzf "$out/src/llama_cpp_python-0.3.36.tar.gz" -C "$out/src"
vendor=$out/src/llama_cpp_python-0.3.36/vendor/llama.cpp
# OpenMP as in the pip build; ggml's AMX and AVX-512 paths off, every AVX2-class one on.
cmake -S "$vendor" -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$out/cmake.log" 2>&1 \
    || { tail -20 "$out/cmake.log" >&2; exit 1; }
echo "llama.cpp AVX2: compiling (progress every 10 steps) ..." >&2
cmake --build "$out/cmake" --target llama -j "$(nproc)" 2>&1 | tee "$out/build.log" \
    | { grep --line-buffered -oE '^\[ *[0-9]+%\]' || true; } \
    | { n=0; while read -r step; do  # a shell loop: mawk would hold its input back
            n=$((n + 1)); [ $((n % 10)) -ne 1 ] || echo "  llama.cpp AVX2 $step" >&2; done; }
# The libraries stay in the build tree, whose run path links them to each other.
test -f "$lib/libllama.so" || { echo "llama.cpp AVX2: no libllama.so built" >&2; exit 1; }
echo "llama.cpp AVX2 build: $lib" >&2
