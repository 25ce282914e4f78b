"""Data shipped with v8 (installed as v8dialect.circuit_data)."""
