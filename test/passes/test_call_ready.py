"""Call-ready IR is typed: calls take SSA values and typed constants, never C text, and the
printed module parses back to the same C."""

from __future__ import annotations

import re
import sys
from io import StringIO
from pathlib import Path

import pytest
from v8passes.emit_c import print_module
from v8passes.lower_to_kernels import LowerToKernels
from v8passes.prepare_calls import PrepareCalls
from v8passes.resolve_contracts import ResolveContracts
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneType,
    f32,
    i32,
    i64,
)
from xdsl.passes import PassPipeline

from v8dialect.builder.build import build_from_file
from v8dialect.diagnostics import V8Error
from v8dialect.ir.call_ready import (
    EntryValue,
    EntryValueOp,
    KernelDeclOp,
    PtrType,
    RequireOp,
    ScratchNeedOp,
    SelectorAttr,
    ThreadpoolType,
    ir_type,
)
from v8dialect.ir.dialect import V8
from v8dialect.ir.lowered import CallOp
from v8dialect.runtime.program import context, parse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402  # pyright: ignore[reportMissingImports]


def call_ready(module: ModuleOp) -> ModuleOp:
    PassPipeline((ResolveContracts(), LowerToKernels(), PrepareCalls())).apply(context(), module)
    return module


def c_text(module: ModuleOp) -> str:
    out = StringIO()
    print_module(module, out)
    return out.getvalue()


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> ModuleOp:
    gguf = tmp_path_factory.mktemp("qwen3") / "m.gguf"
    tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], gguf)  # pyright: ignore
    return call_ready(build_from_file(gguf, "qwen3", overrides=["ggml_build=avx512"]))


def test_abi_c_types_are_ir_types() -> None:
    assert ir_type("const float *") == PtrType(f32, const=True)
    assert ir_type("void *") == PtrType(NoneType())
    assert ir_type("v8_threadpool *") == ThreadpoolType()
    scalars = [ir_type(c) for c in ("int", "int64_t", "float", "size_t")]
    assert scalars == [i32, i64, f32, IndexType()]
    with pytest.raises(ValueError, match="no IR type for the C type 'double'"):
        ir_type("double")


def test_the_dialect_registers_no_c_text_attribute() -> None:
    assert "v8.cexpr" not in {a.name for a in V8.attributes}


def test_calls_take_values_and_typed_constants(qwen3: ModuleOp) -> None:
    calls = [op for op in qwen3.walk() if isinstance(op, CallOp)]
    decls = {op.sym_name.data: op for op in qwen3.walk() if isinstance(op, KernelDeclOp)}
    assert calls and {c.callee.data for c in calls} == set(decls)
    for call in calls:
        assert [a.constant.data for a in call.args.data if isinstance(a, SelectorAttr)] == [
            call.resolved.word("selector")]
        assert len(call.args.data) == len(decls[call.callee.data].function_type.inputs.data)
        if call.resolved.calls_threadpool:
            pool = call.values[0].owner
            assert isinstance(pool, EntryValueOp) and pool.entry is EntryValue.POOL


def test_run_time_lengths_are_arith_on_entry_values(qwen3: ModuleOp) -> None:
    prefill = next(op for op in qwen3.walk() if isinstance(op, arith.AddiOp))
    assert {type(v.owner) for v in prefill.operands} <= {EntryValueOp, arith.ConstantOp}
    requires = [op for op in qwen3.walk() if isinstance(op, RequireOp)]
    assert requires and all(isinstance(r.condition.owner, arith.CmpiOp) for r in requires)
    assert any(isinstance(op, ScratchNeedOp) for op in qwen3.walk())
    text = c_text(qwen3)
    assert "V8_REQUIRE(n_past + n_tokens <= 4096, V8_ERR_BAD_DIMENSION);" in text
    assert "V8_REQUIRE(n_past + 1 <= 4096, V8_ERR_BAD_DIMENSION);" in text


def test_the_printed_module_parses_back_to_the_same_c(qwen3: ModuleOp) -> None:
    reparsed = parse(str(qwen3))
    assert str(reparsed) == str(qwen3)
    assert c_text(reparsed) == c_text(qwen3)


def test_a_call_that_does_not_fit_its_declaration_is_refused(qwen3: ModuleOp) -> None:
    module = parse(str(qwen3))
    call = next(op for op in module.walk() if isinstance(op, CallOp))
    args = list(call.args.data)
    call.properties["args"] = ArrayAttr(args[:-1])
    with pytest.raises(V8Error, match=rf"emit-c: passes {len(args) - 1} arguments but "
                                      rf"'{call.callee.data}' takes {len(args)}"):
        c_text(module)
    selector = next(i for i, a in enumerate(args) if isinstance(a, SelectorAttr))
    pointer = next(i for i, a in enumerate(args) if isinstance(a, IntegerAttr)
                   and isinstance(a.type, IndexType) and isinstance(call.values[a.value.data].type, MemRefType))
    args[selector], args[pointer] = args[pointer], args[selector]
    call.properties["args"] = ArrayAttr(args)
    with pytest.raises(V8Error, match=rf"emit-c: argument {min(selector, pointer) + 1} \('contract'\) is "):
        c_text(module)


def test_the_last_token_row_is_a_pointer_to_row_n_tokens_minus_one(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """--prefill-logits last: the last layer's two selected rows (attention output, residual)
    are const pointers to row n_tokens-1 of their buffers, and the module round-trips."""
    gguf = tmp_path_factory.mktemp("qwen3_last") / "m.gguf"
    tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], gguf)  # pyright: ignore
    module = call_ready(build_from_file(gguf, "qwen3", overrides=["ggml_build=avx512"],
                                        prefill_logits="last"))
    text = c_text(module)
    widths = re.findall(r"const float \*b\d+ = \w+ \+ \(n_tokens - 1\) \* (\d+);", text)
    assert len(widths) == 2 and len(set(widths)) == 1, widths
    assert c_text(parse(str(module))) == text
