"""The C ABI read from the headers: prototypes, enum values, cffi declarations."""

from __future__ import annotations

from pathlib import Path

import pytest
from cffi import FFI

from v8dialect.data import c_abi
from v8dialect.data.paths import runtime_c_dir

PUBLIC_HEADERS = sorted(str(p.relative_to(runtime_c_dir())) for p in runtime_c_dir().rglob("v8_*.h"))


def write_header(tmp_path: Path, text: str, name: str = "probe.h") -> Path:
    header = tmp_path / name
    header.write_text(f"#include <stdint.h>\n#include <stddef.h>\n{text}\n")
    return header


def test_enum_values_are_evaluated_as_c_does(tmp_path: Path) -> None:
    header = write_header(tmp_path, "enum { A = 1u << 3, B, C = A | 2, D = -1, E = 'a', F = -7 / 2,\n"
                                    "       G = -7 % 2, H = (int)(256 / 16) };\n"
                                    "typedef enum probe_kind { K0, K1 = 5, K2 } probe_kind;")
    abi = c_abi.parse_headers([header])
    assert abi.constants == {"A": 8, "B": 9, "C": 10, "D": -1, "E": 97, "F": -3, "G": -1, "H": 16,
                             "K0": 0, "K1": 5, "K2": 6}
    assert abi.enums[1].declaration() == "typedef enum probe_kind { K0 = 0, K1 = 5, K2 = 6 } probe_kind;"


def test_prototypes_keep_names_types_and_order(tmp_path: Path) -> None:
    header = write_header(tmp_path, "typedef struct pool pool;\n"
                                    "const char *probe(pool *p, const float *x, int64_t n, void *s[]);\n"
                                    "static inline int helper(int a) { return a; }\n"
                                    "size_t probe_bytes(void);")
    abi = c_abi.parse_headers([header])
    assert set(abi.functions) == {"probe", "probe_bytes"}, "static inline helpers are not ABI"
    probe = abi.functions["probe"]
    assert probe.returns == "const char *"
    assert [(p.name, p.ctype) for p in probe.params] == [
        ("p", "pool *"), ("x", "const float *"), ("n", "int64_t"), ("s", "void **")]
    assert probe.where.endswith("probe.h:4")
    assert abi.functions["probe_bytes"].prototype() == "size_t probe_bytes(void);"


def test_types_become_cffi_declarations(tmp_path: Path) -> None:
    header = write_header(tmp_path, "#define N 8\n"
                                    "typedef struct opaque opaque;\n"
                                    "typedef struct blk { uint16_t d; uint8_t qs[N / 2]; int64_t a, b; } blk;\n"
                                    "typedef void (*task_fn)(void *ctx, int64_t task);\n"
                                    "int run(opaque *o, task_fn fn, blk *b);")
    cdef = c_abi.cdef_for([header])
    assert "typedef struct opaque opaque;" in cdef
    assert "typedef struct blk { uint16_t d; uint8_t qs[4]; int64_t a; int64_t b; } blk;" in cdef
    assert "typedef void (*task_fn)(void *ctx, int64_t task);" in cdef
    ffi = FFI()
    ffi.cdef(cdef)
    assert ffi.sizeof("blk") == 24


def test_functions_filter_and_missing_names(tmp_path: Path) -> None:
    header = write_header(tmp_path, "enum { SEL = 4 };\nint one(int a);\nint two(int b);")
    cdef = c_abi.cdef_for([header], functions=["two"])
    assert "int two(int b);" in cdef and "one" not in cdef and "SEL = 4" in cdef
    with pytest.raises(c_abi.CAbiError, match="three not declared"):
        c_abi.cdef_for([header], functions=["three"])


def test_included_headers_are_read_once(tmp_path: Path) -> None:
    write_header(tmp_path, "#ifndef BASE_H\n#define BASE_H\nenum { BASE = 1 };\n#endif", "base.h")
    first = write_header(tmp_path, '#include "base.h"\nint f(void);', "first.h")
    second = write_header(tmp_path, '#include "base.h"\nint g(void);', "second.h")
    cdef = c_abi.cdef_for([first, second], include_dirs=[tmp_path])
    assert cdef.count("BASE = 1") == 1 and "int f(void);" in cdef and "int g(void);" in cdef


def test_runtime_status_values_come_from_the_header() -> None:
    values = c_abi.constants(["v8_runtime.h"])
    text = (runtime_c_dir() / "include" / "v8_runtime.h").read_text()
    for name in ("V8_OK", "V8_ERR_BAD_DIMENSION", "V8_ERR_UNSUPPORTED_ISA"):
        assert f"{name} = {values[name]}" in text
    assert values["V8_CPU_AVX512BF16"] == 1 << 8


@pytest.mark.parametrize("header", PUBLIC_HEADERS)
def test_every_public_header_gives_a_cdef_cffi_accepts(header: str) -> None:
    ffi = FFI()
    ffi.cdef(c_abi.cdef_for([header]))
    assert ffi.typeof("v8_status") is not None


def test_intrinsics_and_system_headers_are_never_read(tmp_path: Path) -> None:
    header = write_header(tmp_path, "#include <immintrin.h>\n#include <math.h>\nint f(int a);")
    assert list(c_abi.parse_headers([header]).functions) == ["f"]
    vector = write_header(tmp_path, "#include <immintrin.h>\n__m256 g(__m256 a);", "vector.h")
    with pytest.raises(c_abi.CAbiError, match="cannot parse"):
        c_abi.parse_headers([vector])


def test_a_constant_divided_by_zero_is_reported(tmp_path: Path) -> None:
    with pytest.raises(c_abi.CAbiError, match="division by zero"):
        c_abi.parse_headers([write_header(tmp_path, "enum { A = 1 / 0 };")])


def test_a_header_that_does_not_preprocess_is_reported(tmp_path: Path) -> None:
    header = write_header(tmp_path, '#include "absent.h"')
    with pytest.raises(c_abi.CAbiError, match="preprocessing"):
        c_abi.parse_headers([header])
    with pytest.raises(c_abi.CAbiError, match="not found"):
        c_abi.parse_headers(["no/such.h"])
