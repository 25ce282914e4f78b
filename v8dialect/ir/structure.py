"""The shape of a module the v8 passes can work on, checked before any of them runs.

xDSL 0.75's verifier does not check dominance, and the passes walk a function's
body as one block in order.  A value used before its definition, a value taken
from another function, or a branching function body would otherwise surface
deep inside a pass as a KeyError or as xDSL's own wording.  Each finding here
is a located diagnostic in the user's terms.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.traits import IsolatedFromAbove

from v8dialect.diagnostics import V8Error, op_error


def value_name(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


def _ancestor_in(op: Operation, block: Block) -> tuple[Operation | None, bool]:
    """The op or its ancestor that sits in `block`'s region, and whether the way up
    crosses an op isolated from above (a function) before reaching it."""
    region = block.parent_region()
    current = op
    crossed = False
    while True:
        if current.parent_region() is region:
            return current, crossed
        parent = current.parent_op()
        if parent is None:
            return None, crossed
        if parent.has_trait(IsolatedFromAbove):
            crossed = True
        current = parent


def _defining_block(value: SSAValue) -> tuple[Operation | None, Block | None]:
    """The op that defines `value` (None for a block argument) and the block it sits in."""
    match value:
        case OpResult():
            return value.op, value.op.parent_block()
        case BlockArgument():
            return None, value.block
        case _:
            return None, None


def _use_error(op: Operation, value: SSAValue, positions: dict[Block, dict[Operation, int]]) -> str | None:
    owner, block = _defining_block(value)
    if block is None:
        return f"uses {value_name(value)}, which is not part of this module"
    user, crossed = _ancestor_in(op, block)
    if user is None:
        return f"uses {value_name(value)}, which is defined in another region that does not enclose it"
    if crossed:
        return f"uses {value_name(value)}, which is defined outside its function"
    if owner is None or user.parent_block() is not block or isinstance(block.parent_op(), ModuleOp):
        # A block argument is visible in its whole block; another block of a branching body is
        # reported as a structure error of the function; a module body is a graph region.
        return None
    if owner is user:
        return f"uses {value_name(value)}, its own result"
    order = positions.get(block)
    if order is None:
        order = positions[block] = {o: i for i, o in enumerate(block.ops)}
    if order[owner] > order[user]:
        return f"uses {value_name(value)} before its definition"
    return None


def structure_errors(module: ModuleOp, single_block_functions: bool = True) -> list[str]:
    """Uses of values their user cannot see, and (for the passes, which walk a function
    body in order) function bodies that are not exactly one block."""
    errors: list[str] = []
    positions: dict[Block, dict[Operation, int]] = {}
    for op in module.walk():
        if single_block_functions and isinstance(op, func.FuncOp):
            blocks = len(op.body.blocks)
            if blocks != 1:
                shape = "has no body" if blocks == 0 else f"has {blocks} blocks"
                errors.append(op_error(op, f"function @{op.sym_name.data} {shape}; "
                                           "v8 works on function bodies of exactly one block"))
        for value in op.operands:
            if (message := _use_error(op, value, positions)) is not None:
                errors.append(op_error(op, message))
    return errors


def check_structure(module: ModuleOp, stage: str | None = None) -> None:
    """Raise the located structure errors of `module`, naming the stage that refuses it.
    Without a stage (plain parsing) only the uses are checked: branching bodies and
    declarations are valid IR, just not something the passes lower."""
    errors = structure_errors(module, single_block_functions=stage is not None)
    if errors and stage is not None:
        errors = [e.replace(": error: ", f": error: {stage}: ", 1) for e in errors]
    if errors:
        raise V8Error(errors)


def is_entry_point(fn: func.FuncOp) -> bool:
    """A phase the program exports; private functions are layer functions the phases call."""
    return fn.sym_visibility is None or fn.sym_visibility.data != "private"


def entry_points(module: ModuleOp) -> list[func.FuncOp]:
    """The module's phases, in order (its layer functions left out)."""
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and is_entry_point(op)]
