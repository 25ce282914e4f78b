"""Every v8 pass inherits the structure and pinning checks from V8Pass; none calls them itself."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
from v8passes import get_all_passes
from v8passes.lower_to_kernels import LowerToKernels
from v8passes.resolve_contracts import ResolveContracts
from v8passes.v8_pass import Pinning, V8Pass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import PassPipeline

from v8dialect.diagnostics import V8Error
from v8dialect.ir.lowered import KernelOp
from v8dialect.runtime.program import context, parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3_layer.mlir"


@dataclass(frozen=True)
class RenameNode(V8Pass):
    """A pass that changes a pinned op's node name: the check after it must refuse."""

    name = "rename-node"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernel = next(o for o in op.walk() if isinstance(o, KernelOp))
        kernel.properties["node"] = StringAttr("renamed")


def test_every_registered_pass_is_a_v8_pass() -> None:
    for name, factory in get_all_passes().items():
        assert issubclass(factory(), V8Pass), name


def test_no_pass_calls_check_pinned_itself() -> None:
    for factory in get_all_passes().values():
        source = inspect.getsource(inspect.getmodule(factory()))  # type: ignore[arg-type]
        assert "check_pinned(" not in source and "check_structure(" not in source


def test_a_pass_needing_the_ledger_refuses_an_unresolved_module() -> None:
    with pytest.raises(V8Error, match="lower-to-kernels: no resolution ledger"):
        PassPipeline((LowerToKernels(),)).apply(context(), parse(EXAMPLE.read_text()))


def test_a_change_to_a_pinned_fact_is_refused_after_the_pass() -> None:
    module = parse(EXAMPLE.read_text())
    with pytest.raises(V8Error, match=r"rename-node: node '[a-z]+::renamed' is not in the resolution ledger"):
        PassPipeline((ResolveContracts(), LowerToKernels(), RenameNode())).apply(context(), module)


def test_pinning_policies() -> None:
    assert ResolveContracts.pinned_before is Pinning.UNCHECKED
    assert ResolveContracts.pinned_after is Pinning.REQUIRED
    assert LowerToKernels.pinned_before is LowerToKernels.pinned_after is Pinning.REQUIRED
