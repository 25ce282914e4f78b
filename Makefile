# Test, gate and benchmark entry points; `make test` is what CI runs.
# Default to what .ci/run built, so the targets work in a fresh shell without activating anything.
VENV_PYTHON := $(wildcard $(CURDIR)/.venv/bin/python)
ifneq ($(VENV_PYTHON),)
PYTHON ?= $(VENV_PYTHON)
export PATH := $(CURDIR)/.venv/bin:$(PATH)
endif
PYTHON ?= python
LIT ?= lit
# The AVX2-only ggml .ci/run builds, for the AVX2 lane-tree evidence.
AVX2_GGML_PYTHON := $(wildcard $(CURDIR)/.venv-ggml-avx2/bin/python)
ifneq ($(AVX2_GGML_PYTHON),)
export V8_GGML_AVX2_PYTHON ?= $(AVX2_GGML_PYTHON)
endif
# The AVX2-only llama.cpp .ci/run builds (test/e2e/llamacpp_avx2.sh), for the AVX2 variant's
# end-to-end parity.
AVX2_LLAMACPP_LIB := $(wildcard $(CURDIR)/build/llamacpp-avx2/cmake/bin/libllama.so)
ifneq ($(AVX2_LLAMACPP_LIB),)
export V8_LLAMACPP_AVX2_LIB ?= $(patsubst %/,%,$(dir $(AVX2_LLAMACPP_LIB)))
endif
PYTEST = $(PYTHON) -m pytest -q
export V8_EVIDENCE_LEDGER ?= $(CURDIR)/build/evidence/ledger.jsonl

.PHONY: test lint lit pytest clean-ledger evidence-gate evidence-update bench \
        test-llamacpp-parity test-llamacpp-parity-long \
        test-numerical-contracts test-threadpool-parity test-attention-f16-split-kv test-e2e \
        v8-regression-fast

# The full suite: FileCheck regression tests, every pytest (numerics and evidence against
# ggml and PyTorch), then the gate that checks every claimed status against the fresh ledger.
test: clean-ledger lit pytest evidence-gate

# ruff and pyright (strict, as pyproject.toml configures it) over the compiler's packages.
lint:
	$(PYTHON) -m ruff check v8dialect passes
	$(PYTHON) -m pyright

clean-ledger:
	rm -f $(V8_EVIDENCE_LEDGER)

lit:
	$(LIT) -sv test/

pytest:
	$(PYTEST) -m "not long" test/

evidence-gate:
	$(PYTHON) -m v8dialect.evidence.gate

# Rewrite registry and kernel-map statuses from the ledger of the last full run.
evidence-update:
	$(PYTHON) -m v8dialect.evidence.gate --update

# ---- validation gates: each builds the C and runs numerics --------------------------------

# Resolution, every attention contract's numerics (oracle, production, threadpool, ggml,
# PyTorch) and the stitched program through the emitted C.
test-numerical-contracts:
	$(LIT) -sv test/passes/resolve-contracts
	$(PYTEST) test/runtime_c/attention test/contracts test/passes/test_emit_c_numerics.py

# Threadpool dispatch vs serial / oracle at 1, 2, 3, 4 and 8 workers, every provider.
test-threadpool-parity:
	$(PYTEST) -k "threadpool or workers" test/runtime_c test/passes

# Split-KV decode: f16_online_fp32_merge against its oracle, the numpy model and ggml,
# the KV 511/512 threshold and the V x 8 negative control.
test-attention-f16-split-kv:
	$(PYTEST) -k "split or threshold or negative" test/runtime_c/attention

# Stitched end-to-end parity of every model family.
test-e2e:
	$(PYTEST) -m "not long" test/e2e

# The program built from each family's GGUF against llama.cpp on the same file, bit for bit
# (threads 1 and 2, repacking on and off, route boundaries, M-RoPE streams, a planted
# difference); part of `make test`.  The -long target adds 96-step decode runs.
test-llamacpp-parity:
	$(PYTEST) -m "not long" test/e2e/test_llamacpp_parity.py

test-llamacpp-parity-long:
	$(PYTEST) test/e2e/test_llamacpp_parity.py

# The quick subset: lit, compiler unit tests, the emitted-C numerics and the regressions
# for what the design prevents.
v8-regression-fast:
	$(LIT) -sv test/
	$(PYTEST) test/v8dialect test/passes test/regressions

# Side-by-side benchmarks against ggml; not part of `make test`.
bench:
	$(PYTHON) bench/quant_vs_ggml.py
	$(PYTHON) bench/repacked_vs_llamacpp.py
	$(PYTHON) bench/attention_vs_ggml.py
	$(PYTHON) bench/model_vs_llamacpp.py
	$(PYTHON) bench/compile_path.py
	sh bench/decode_gemvs.sh 1
	sh bench/decode_gemvs.sh 2

# The runtime_c numerics with every extension built under AddressSanitizer and UBSan
# (V8_SANITIZE is part of the build cache key).  cffi loads the extensions into a plain
# Python, so the ASan runtime is preloaded; leaks are not checked (the interpreter keeps
# memory until exit); any report aborts the test run.
SANITIZE_ENV = V8_SANITIZE=address,undefined \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: test-sanitize fuzz
# One pytest per folder: the folders' helper modules share names (tiled_model).
SANITIZE_DIRS = $(sort $(dir $(wildcard test/runtime_c/*/conftest.py test/runtime_c/*/test_*.py)))
test-sanitize:
	set -e; for d in $(SANITIZE_DIRS); do $(SANITIZE_ENV) $(PYTEST) -p no:cacheprovider $$d; done

# The fuzz suite at length (1,200 inputs for each of 15 targets); `make test` runs it bounded.
fuzz:
	V8_FUZZ_EXAMPLES=1200 $(PYTEST) test/fuzz
