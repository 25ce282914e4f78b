"""Mutated MLIR, registries, kernel maps, circuits, config JSON and GGUF files through v8-opt and
v8-build, mutated command lines of v8-opt, v8-build, v8-parity and v8-run, and mutated contract
ids through `python -m v8dialect.ir.contract_ir`: exit 0, or exit 1 with a located error; never an
exception, never over two seconds.

Bounded for `make test` (V8_FUZZ_EXAMPLES per target, default 12, derandomized); `make fuzz`
runs thousands.  Every input that once broke the rule lives in corpus/<target>/ and is replayed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import CORPUS, EXAMPLE, QWEN3_CONFIG, ROOT, check_input, cli_seeds, tiny_gguf

try:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - the suite must say why it cannot run
    st = None

if st is None:
    def test_hypothesis_is_installed() -> None:
        pytest.fail("the fuzz suite needs hypothesis: pip install -e '.[test]' (or pip install hypothesis)",
                    pytrace=False)
else:
    EXAMPLES = int(os.environ.get("V8_FUZZ_EXAMPLES", "12"))
    LONG_RUN = "V8_FUZZ_EXAMPLES" in os.environ
    # No shrinking: the first input that breaks the rule is reported and kept as it is.
    SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG_RUN,
                        database=None, suppress_health_check=list(HealthCheck),
                        phases=[Phase.explicit, Phase.generate])

    # MLIR fragments that have broken lexers, parsers and passes before.
    TOKENS = [b'"', b'\\', b'\\q', b'"\\', b"\n", b"{", b"}", b"<", b">", b"(", b")", b"[", b"]", b",",
              b":", b"=", b"%h", b"%x", b"%0", b"^bb1:", b"loc(unknown)", b'loc("n")', b"// -----", b"//",
              b"2147483648", b"-1", b"0", b"9223372036854775808", b"1e309", b"nan", b"0x", b"\xff",
              b"\xc3", b"tensor<", b"x", b"?", b"f16", b"i32", b"!v8.q4_k", b"#v8.partition<",
              b"decode", b"prefill", b"func.func", b"v8.reshape", b"dense<", b"#", b"@", b"\x00",
              b'"a' + b"a" * 40, b"}" * 30, b"(" * 200, b"[" * 300]

    @st.composite
    def mutated(draw: Any, seed: bytes) -> bytes:
        data = bytearray(seed)
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "truncate",
                                         "swap_lines", "digit"]))
            pos = draw(st.integers(0, len(data)))
            if kind == "delete":
                del data[pos:pos + draw(st.integers(1, 64))]
            elif kind == "insert":
                data[pos:pos] = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=8))
            elif kind == "replace":
                data[pos:pos + draw(st.integers(1, 16))] = draw(st.sampled_from(TOKENS))
            elif kind == "duplicate":
                data[pos:pos] = data[pos:pos + draw(st.integers(1, 400))]
            elif kind == "truncate":
                del data[pos:]
            elif kind == "swap_lines":
                lines = bytes(data).split(b"\n")
                i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
                data = bytearray(b"\n".join(lines))
            else:
                digits = [i for i, c in enumerate(data) if 48 <= c <= 57]
                if digits:
                    at = draw(st.sampled_from(digits))
                    data[at:at + 1] = draw(st.sampled_from([b"0", b"9" * 12, b"-", b"3", b"65536"]))
        return bytes(data)

    def json_values() -> Any:
        scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
                   | st.text(max_size=12) | st.sampled_from(["", "none", "ascending", "fp32", "q4_k",
                                                             "validated", "x" * 300, "\udcff"]))
        return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)

    def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        found = [prefix]
        if isinstance(doc, dict):
            for key, value in doc.items():  # pyright: ignore
                found += paths(value, (*prefix, key))
        elif isinstance(doc, list):
            for i, value in enumerate(doc):  # pyright: ignore
                found += paths(value, (*prefix, i))
        return found

    @st.composite
    def mutated_json(draw: Any, seed: bytes) -> bytes:
        if draw(st.integers(0, 3)) == 0:
            return draw(mutated(seed))  # bytes: broken JSON, invalid UTF-8, truncation
        doc = json.loads(seed)
        for _ in range(draw(st.integers(1, 3))):
            where = draw(st.sampled_from(paths(doc)))
            if not where:
                continue
            parent = doc
            for key in where[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[where[-1]]
            elif draw(st.booleans()) and isinstance(parent, list):
                parent.append(parent[where[-1]])
            else:
                parent[where[-1]] = draw(json_values())
        return json.dumps(doc, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")

    def mlir_seeds() -> list[bytes]:
        seeds = [EXAMPLE.read_bytes()]
        for path in sorted((ROOT / "test" / "dialect").glob("*.mlir")):
            seeds += [chunk.encode() for chunk in path.read_text().split("// -----") if "v8." in chunk]
        return seeds

    def fuzz(target: str, strategy: Callable[[bytes], Any], seeds: list[bytes]) -> Callable[[], None]:
        @SETTINGS
        @given(data=st.data())
        def run(data: Any) -> None:
            seed = data.draw(st.sampled_from(seeds))
            with tempfile.TemporaryDirectory() as folder:
                check_input(target, data.draw(strategy(seed)), Path(folder))
        return run

    MLIR = mlir_seeds()
    test_mlir_parse = fuzz("mlir", mutated, MLIR)
    test_mlir_resolve = fuzz("mlir-resolve", mutated, MLIR[:1])
    test_mlir_prepare = fuzz("mlir-prepare", mutated, MLIR[:1])
    test_mlir_emit_c = fuzz("mlir-c", mutated, MLIR[:1])
    test_registry = fuzz("registry", mutated_json,
                         [p.read_bytes() for p in sorted((ROOT / "contracts").glob("*.json"))])
    test_kernel_map = fuzz("kernel-map", mutated_json,
                           [(ROOT / "test" / "Inputs" / "kernel_maps" / "q4_k_gemv.kmap.json").read_bytes()])
    test_circuit = fuzz("circuit", mutated_json,
                        [p.read_bytes() for p in sorted((ROOT / "circuits").glob("*.json"))])
    test_config = fuzz("config", mutated_json, [json.dumps(QWEN3_CONFIG).encode()])

    with tempfile.TemporaryDirectory() as _folder:
        GGUF_SEED = tiny_gguf(Path(_folder)).read_bytes()
    test_gguf = fuzz("gguf", mutated, [GGUF_SEED])
    test_cli_opt = fuzz("cli-opt", mutated, cli_seeds("cli-opt"))
    test_cli_build = fuzz("cli-build", mutated, cli_seeds("cli-build"))
    test_cli_parity = fuzz("cli-parity", mutated, cli_seeds("cli-parity"))
    test_cli_run = fuzz("cli-run", mutated, cli_seeds("cli-run"))
    test_contract_id = fuzz("contract-id", mutated,
                            [b"f16_online_fp32_merge", b"q4_k_x_q8_k_fp32_block_order\0fp32_online",
                             b"f16_flash_auto_qtile64_fp32_dot"])


CORPUS_FILES = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[f"{p.parent.name}/{p.name}" for p in CORPUS_FILES])
def test_corpus(path: Path, tmp_path: Path) -> None:
    check_input(path.parent.name, path.read_bytes(), tmp_path)
