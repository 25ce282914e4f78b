"""The v8 dialect's IR: types, attributes, GraphIR / LoweredIR / call-ready ops, and the checks
every stage runs on it (structure, pinning, the resolution ledger).
"""
