"""v8 passes, one per module, registered by name with lazy factories."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    def resolve_contracts() -> type[ModulePass]:
        from v8passes.resolve_contracts import ResolveContracts

        return ResolveContracts

    def lower_to_kernels() -> type[ModulePass]:
        from v8passes.lower_to_kernels import LowerToKernels

        return LowerToKernels

    def prepare_calls() -> type[ModulePass]:
        from v8passes.prepare_calls import PrepareCalls

        return PrepareCalls

    def keep_checkpoints() -> type[ModulePass]:
        from v8passes.keep_checkpoints import KeepCheckpoints

        return KeepCheckpoints

    def test_corrupt_resolution() -> type[ModulePass]:
        from v8passes.test_corrupt_resolution import TestCorruptResolution

        return TestCorruptResolution

    return {
        "resolve-contracts": resolve_contracts,
        "test-corrupt-resolution": test_corrupt_resolution,
        "lower-to-kernels": lower_to_kernels,
        "prepare-calls": prepare_calls,
        "keep-checkpoints": keep_checkpoints,
    }
