# Test and benchmark entry points; `make test` is what CI runs.
PYTHON ?= python
LIT ?= lit
export V8_EVIDENCE_LEDGER ?= $(CURDIR)/build/evidence/ledger.jsonl

.PHONY: test lit pytest clean-ledger bench

test: clean-ledger lit pytest

clean-ledger:
	rm -f $(V8_EVIDENCE_LEDGER)

# FileCheck regression suite (*.mlir under test/)
lit:
	$(LIT) -sv test/

# Unit, numerics and evidence tests (pytest + cffi + ggml/PyTorch oracles)
pytest:
	$(PYTHON) -m pytest -q test/

# Side-by-side benchmarks against ggml; not part of `make test`
bench:
	$(PYTHON) bench/quant_vs_ggml.py
	$(PYTHON) bench/attention_vs_ggml.py
