"""C code of the elementwise ops the printer writes itself (residual add, SwiGLU, GeGLU).

Each op's loop is written once as a template over a thin vector vocabulary
(VT, W, LOAD, STORE, ADD, MUL, DIV, SET1); the ISA tables instantiate it for
AVX-512 and AVX2, each with a scalar tail, and the scalar variant is the tail
loop alone.  Transcendentals stay glibc's expf/tanhf per lane, because the
contracts name those functions; everything else is one IEEE operation per
vector instruction in the contract's order, so every variant gives the bits
of the scalar reference.
"""

from __future__ import annotations

from collections.abc import Mapping

ISA_TABLES: Mapping[str, Mapping[str, str]] = {
    "avx512": {
        "target": "avx512f", "VT": "__m512", "W": "16", "LOAD": "_mm512_loadu_ps",
        "STORE": "_mm512_storeu_ps", "ADD": "_mm512_add_ps", "MUL": "_mm512_mul_ps",
        "DIV": "_mm512_div_ps", "SET1": "_mm512_set1_ps",
    },
    "avx2": {
        "target": "avx2,fma", "VT": "__m256", "W": "8", "LOAD": "_mm256_loadu_ps",
        "STORE": "_mm256_storeu_ps", "ADD": "_mm256_add_ps", "MUL": "_mm256_mul_ps",
        "DIV": "_mm256_div_ps", "SET1": "_mm256_set1_ps",
    },
}

# The scalar statement per element (also the tail of every vector variant).
SCALAR_BODY: Mapping[str, str] = {
    "residual_add": "y[i] = a[i] + b[i];",
    "swiglu": "y[i] = (a[i] / (1.0f + expf(-a[i]))) * b[i];",
    "geglu": (
        "y[i] = ((0.5f * a[i]) * (1.0f + tanhf((V8_GELU_SQRT_2_OVER_PI * a[i]) * "
        "(1.0f + (V8_GELU_COEF_A * a[i]) * a[i])))) * b[i];"
    ),
}

VECTOR_BODY: Mapping[str, str] = {
    "residual_add": "        {STORE}(y + i, {ADD}({LOAD}(a + i), {LOAD}(b + i)));",
    "swiglu": """\
        float e[{W}];
        for (int j = 0; j < {W}; ++j) {{
            e[j] = expf(-a[i + j]); /* the contract names glibc's expf */
        }}
        {VT} silu = {DIV}({LOAD}(a + i), {ADD}({SET1}(1.0f), {LOAD}(e)));
        {STORE}(y + i, {MUL}(silu, {LOAD}(b + i)));""",
    "geglu": """\
        {VT} g = {LOAD}(a + i);
        {VT} inner = {MUL}({MUL}({SET1}(V8_GELU_SQRT_2_OVER_PI), g),
                           {ADD}({SET1}(1.0f), {MUL}({MUL}({SET1}(V8_GELU_COEF_A), g), g)));
        float t[{W}];
        {STORE}(t, inner);
        for (int j = 0; j < {W}; ++j) {{
            t[j] = tanhf(t[j]); /* the contract names glibc's tanhf */
        }}
        {VT} gelu = {MUL}({MUL}({SET1}(0.5f), g), {ADD}({SET1}(1.0f), {LOAD}(t)));
        {STORE}(y + i, {MUL}(gelu, {LOAD}(b + i)));""",
}

NEEDS_OPS_HEADER = frozenset({"geglu"})

SIGNATURE = "static void {name}(float *y, const float *a, const float *b, int64_t n)"


def function_name(kind: str, isa: str) -> str:
    return f"v8_inline_{kind}_{isa}"


def scalar_variant(kind: str) -> str:
    return (SIGNATURE.format(name=function_name(kind, "scalar")) + " {\n"
            f"    for (int64_t i = 0; i < n; ++i) {{\n        {SCALAR_BODY[kind]}\n    }}\n}}\n")


def vector_variant(kind: str, isa: str) -> str:
    table = ISA_TABLES[isa]
    body = VECTOR_BODY[kind].format(**table)
    return (
        "#pragma GCC push_options\n"
        f'#pragma GCC target("{table["target"]}")\n'
        + SIGNATURE.format(name=function_name(kind, isa)) + " {\n"
        f"    const int64_t n_vec = n - n % {table['W']};\n"
        "    int64_t i = 0;\n"
        f"    for (; i < n_vec; i += {table['W']}) {{\n{body}\n    }}\n"
        f"    for (; i < n; ++i) {{\n        {SCALAR_BODY[kind]}\n    }}\n}}\n"
        "#pragma GCC pop_options\n"
    )


def runtime_dispatcher(kind: str, variants: tuple[str, ...]) -> str:
    lines = [SIGNATURE.format(name=f"v8_inline_{kind}") + " {",
             "    switch (v8_cpu_best_isa()) {"]
    if "avx512" in variants:
        lines += ["    case V8_ISA_AVX512:", f"        {function_name(kind, 'avx512')}(y, a, b, n);",
                  "        return;"]
    if "avx2" in variants:
        lines += ["    case V8_ISA_AVX2:", f"        {function_name(kind, 'avx2')}(y, a, b, n);",
                  "        return;"]
    lines += ["    default:", f"        {function_name(kind, 'scalar')}(y, a, b, n);", "        return;",
              "    }", "}"]
    return "\n".join(lines) + "\n"


def compile_time_dispatcher(kind: str, variants: tuple[str, ...]) -> str:
    """The variant the translation unit's own -m flags allow, fixed when compiled."""
    branches: list[str] = []
    if "avx512" in variants:
        branches.append(("defined(__AVX512F__)", function_name(kind, "avx512")))  # type: ignore[arg-type]
    if "avx2" in variants:
        branches.append(("defined(__AVX2__)", function_name(kind, "avx2")))  # type: ignore[arg-type]
    lines = [SIGNATURE.format(name=f"v8_inline_{kind}") + " {"]
    for i, (cond, fn) in enumerate(branches):  # type: ignore[misc]
        lines += [f"#{'if' if i == 0 else 'elif'} {cond}", f"    {fn}(y, a, b, n);"]
    lines += ["#else" if branches else "", f"    {function_name(kind, 'scalar')}(y, a, b, n);"]
    lines += ["#endif" if branches else "", "}"]
    return "\n".join(line for line in lines if line) + "\n"


def inline_functions(kind: str, dispatch: str, variants: tuple[str, ...]) -> str:
    """All C for one inline op kind: its variants and the dispatcher the map declares."""
    if kind not in SCALAR_BODY:
        raise KeyError(kind)
    vector_isas = [isa for isa in ("avx512", "avx2") if isa in variants and dispatch != "scalar"]
    parts = [scalar_variant(kind)] + [vector_variant(kind, isa) for isa in vector_isas]
    if dispatch == "runtime":
        parts.append(runtime_dispatcher(kind, tuple(vector_isas)))
    else:
        parts.append(compile_time_dispatcher(kind, tuple(vector_isas)))
    return "\n".join(parts)
