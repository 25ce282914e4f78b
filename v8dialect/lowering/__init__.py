"""Binding lowered kernel invocations to their kernel maps' C ABI (used by prepare-calls)."""
