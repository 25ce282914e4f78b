"""The registry and kernel maps are loaded once per pipeline and shared by its passes; the IR
records no file system paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from v8passes.lower_to_kernels import LowerToKernels
from v8passes.prepare_calls import PrepareCalls
from v8passes.resolve_contracts import ResolveContracts
from xdsl.passes import PassPipeline

import v8dialect.data.pipeline_data
from v8dialect.data.pipeline_data import pipeline_data
from v8dialect.diagnostics import V8Error
from v8dialect.ir.lowered import CallOp
from v8dialect.runtime.program import context, parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3_layer.mlir"
FIXTURES = ROOT / "test" / "Inputs" / "kernel_maps"
BLOCK = ROOT / "test" / "passes" / "prepare-calls" / "calls.mlir"  # binds under the fixture maps too


def counted_loads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = v8dialect.data.pipeline_data.load_kernel_maps

    def load(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(v8dialect.data.pipeline_data, "load_kernel_maps", load)
    return calls


def test_prepare_calls_binds_with_the_maps_resolve_contracts_named(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = counted_loads(monkeypatch)
    ctx = context()
    module = parse(BLOCK.read_text())
    PassPipeline((ResolveContracts(kernel_maps=str(FIXTURES)), LowerToKernels(), PrepareCalls())).apply(
        ctx, module)
    callees = {op.callee.data for op in module.walk() if isinstance(op, CallOp)}
    assert callees and all(c.startswith("fixture_") for c in callees)
    assert len(loads) == 1  # prepare-calls and the program's sources share one load
    assert pipeline_data(ctx).kernel_sources(sorted({op.resolved.word("kernel") for op in module.walk()
                                                     if isinstance(op, CallOp)})) == []
    assert len(loads) == 1


def test_resolve_contracts_loads_the_maps_the_later_passes_bind_with(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = counted_loads(monkeypatch)
    ctx = context()
    module = parse(BLOCK.read_text())
    PassPipeline((ResolveContracts(kernel_maps=str(FIXTURES)),)).apply(ctx, module)
    assert len(loads) == 1  # resolution itself reads the pipeline's data
    PassPipeline((LowerToKernels(), PrepareCalls())).apply(ctx, module)
    assert len(loads) == 1  # and binding reuses it


def test_the_call_ready_ir_holds_no_paths() -> None:
    module = parse(EXAMPLE.read_text())
    PassPipeline((ResolveContracts(), LowerToKernels(), PrepareCalls())).apply(context(), module)
    text = str(module)
    assert str(ROOT) not in text and '"/' not in text
    assert "v8.c_sources" not in text


def test_packaged_sources_come_from_the_maps_that_bound_the_calls() -> None:
    ctx = context()
    module = parse(EXAMPLE.read_text())
    PassPipeline((ResolveContracts(), LowerToKernels(), PrepareCalls())).apply(ctx, module)
    kernels = sorted({op.resolved.word("kernel") for op in module.walk() if isinstance(op, CallOp)})
    sources = pipeline_data(ctx).kernel_sources(kernels)
    assert sources and all(s.is_absolute() and s.is_file() and s.suffix == ".c" for s in sources)


def test_a_kernel_no_map_binds_is_an_error() -> None:
    with pytest.raises(V8Error, match="kernel 'no.such.kernel' is in no loaded kernel map"):
        pipeline_data(context()).kernel_sources(["no.such.kernel"])
