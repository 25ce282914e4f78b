"""Op kinds, one module each: the GraphIR op (operands, verification, dtypes, layout, kernel-map
constraints), how a circuit op of that kind is built into it, the operand roles its kernel maps
name, and how its lowered call's ABI dimensions are bound.  ``registry.OP_KINDS`` collects them;
adding an op kind means one module here, its word in the vocabulary, its kernel map and C, and
its tests.
"""
