"""v8 passes, one per module, registered by name with lazy factories."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def resolve_contracts() -> type[ModulePass]:
        from v8passes.resolve_contracts import ResolveContracts

        return ResolveContracts

    return {"resolve-contracts": resolve_contracts}
