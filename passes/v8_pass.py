"""V8Pass: the base class of every v8 pass.

Around each pass's ``apply`` it checks what every stage after resolve-contracts owes the
resolution ledger: before the pass runs, the module's structure (values used where their
users can see them, one-block function bodies) and its pinned resolution; after it, the
pinned resolution again, so no pass can change what resolve-contracts chose.  A pass only
says how it stands to the ledger (``pinned_before``, ``pinned_after``); none calls the checks
itself.

A pass's ``registry`` and ``kernel_maps`` options, when it has them, name the data of the
pipeline (see v8dialect/data/pipeline_data.py) before it runs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from v8dialect.data.pipeline_data import pipeline_data
from v8dialect.ir.ledger import read_ledger
from v8dialect.ir.pinning import check_pinned
from v8dialect.ir.structure import check_structure


class Pinning(Enum):
    """How a pass stands to the resolution ledger at one end of its run."""

    REQUIRED = "required"  # the module must carry a ledger that every pinned op matches
    IF_RESOLVED = "if_resolved"  # checked when the module carries a ledger (a pass that may run either side)
    UNCHECKED = "unchecked"  # before resolution, or a test pass that changes a pinned fact on purpose


def check_pinning(module: ModuleOp, stage: str, pinning: Pinning) -> None:
    """The one pinning check of the pipeline: raise V8Error unless `module` satisfies `pinning`."""
    if pinning is Pinning.REQUIRED or (pinning is Pinning.IF_RESOLVED and read_ledger(module) is not None):
        check_pinned(module, stage)


_CHECKED = "_v8_checked_apply"

Apply = Callable[[Any, Context, ModuleOp], None]


@dataclass(frozen=True)
class V8Pass(ModulePass):
    """A module pass whose ``apply`` runs between the structure and pinning checks."""

    pinned_before: ClassVar[Pinning] = Pinning.REQUIRED
    pinned_after: ClassVar[Pinning] = Pinning.REQUIRED

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        body: Apply | None = cls.__dict__.get("apply")
        if body is not None and not getattr(body, _CHECKED, False):
            setattr(cls, "apply", _checked(body))  # noqa: B010 - replaces the subclass's own apply

    def data_options(self) -> dict[str, str | None]:
        """The pipeline data this pass names: its own registry and kernel_maps options."""
        names = {f.name for f in dataclasses.fields(self)} & {"registry", "kernel_maps"}
        return {name: getattr(self, name) for name in sorted(names)}

    def check_entry(self, module: ModuleOp) -> None:
        check_structure(module, self.name)
        check_pinning(module, self.name, self.pinned_before)

    def check_exit(self, module: ModuleOp) -> None:
        check_pinning(module, self.name, self.pinned_after)


def _checked(body: Apply) -> Apply:
    @functools.wraps(body)
    def apply(self: V8Pass, ctx: Context, op: ModuleOp) -> None:
        self.check_entry(op)
        pipeline_data(ctx).select(**self.data_options())
        body(self, ctx, op)
        self.check_exit(op)

    setattr(apply, _CHECKED, True)  # noqa: B010
    return apply
