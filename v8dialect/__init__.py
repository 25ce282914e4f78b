"""v8: numerical-contract compiler dialect for LLM inference kernels."""
