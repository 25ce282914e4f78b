"""Data shipped with v8 (installed as v8dialect.contract_data)."""
