"""runtime_cdef: the runtime core's declarations plus the selected prototypes of a header."""

from __future__ import annotations

import pytest
from cffi import FFI

from v8dialect.data.c_abi import CAbiError, constants
from v8dialect.runtime.cbuild import runtime_cdef


def test_core_alone_declares_the_runtime_header() -> None:
    cdef = runtime_cdef()
    assert "v8_threadpool *v8_threadpool_create(int n_workers);" in cdef
    assert "v8_isa v8_cpu_best_isa(void);" in cdef
    ffi = FFI()
    ffi.cdef(cdef)
    declared = ffi.dlopen(None)  # enough to read the enum constants cffi was given
    header = constants(["v8_runtime.h"])
    for name in ("V8_OK", "V8_ERR_NO_MEMORY", "V8_CPU_AVX512VNNI", "V8_ISA_AVX512"):
        assert getattr(declared, name) == header[name]


def test_a_predicate_selects_prototypes_and_keeps_the_core() -> None:
    cdef = runtime_cdef("quant/v8_quant.h", functions=lambda name: name.startswith("v8_embedding_quant"))
    assert "v8_embedding_quant_ref(" in cdef and "v8_q4_k_gemv(" not in cdef
    assert "v8_parallel_for(" in cdef and "V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER = 1" in cdef


def test_names_select_prototypes_and_an_undeclared_name_is_an_error() -> None:
    cdef = runtime_cdef("quant/v8_quant.h", functions=["v8_q4_k_gemm_ref"])
    assert "v8_q4_k_gemm_ref(" in cdef and "v8_q4_k_gemm(" not in cdef
    with pytest.raises(CAbiError, match="v8_q4_k_gemm_fast not declared"):
        runtime_cdef("quant/v8_quant.h", functions=["v8_q4_k_gemm_fast"])
