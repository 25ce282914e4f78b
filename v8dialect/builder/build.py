"""v8-build: hydrate a circuit with a model manifest into GraphIR.

    v8-build model.gguf --circuit <family> [--prefill-tokens N] [--kv-capacity C]
             [--prefill-logits all|last|auto] -o out.mlir
    v8-build config.json --circuit <family> --set kv_cache_dtype=f32 -o out.mlir

The circuit supplies the graph and every requirement; the manifest supplies
the numbers (layers, heads, dims, RoPE base, epsilon) and the tensor types
that selectors choose contracts by.  The result is a module with ``@prefill``
and ``@decode`` (an encoder: ``@prefill`` only) whose arguments are the
tokens, positions, KV caches and weights, and whose ops carry the contract
built from the registry, the circuit requirement and a ``loc`` pointing at
the op's entry in the circuit file.

Nothing here knows a model family: a conflict between manifest and circuit
(a missing tensor, a shape the circuit does not predict, a head count that
does not divide, an architecture the circuit does not build) is a located
error and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import IO

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Operation
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.function import FunctionBuilder
from v8dialect.builder.hydrate import BuildOptions, default_kv_capacity, hydrate
from v8dialect.builder.values import (
    DECODE_TOKENS,
    DEFAULT_PREFILL_TOKENS,
    MAX_POSITIONS,
    BuildError,
)
from v8dialect.data.circuit_model import Circuit
from v8dialect.data.circuits import load_circuit
from v8dialect.data.contracts import ContractRegistry, load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.manifest import (
    FIELDS,
    Manifest,
    ManifestError,
    ManifestValue,
    parse_override,
    read_manifest,
)
from v8dialect.driver.cli_args import ArgumentParser

# What a decoder's prefill returns: every token's result row, the last token's only, or
# (auto) the last token's where the circuit declares output_rows and every token's elsewhere.
PREFILL_LOGITS = ("all", "last", "auto")


def last_token_only(circuit: Circuit, prefill_logits: str) -> bool:
    """Whether a decoder's prefill returns its last token's row only."""
    if circuit.kind != "decoder":
        return False
    return prefill_logits == "last" or (prefill_logits == "auto" and circuit.output_rows is not None)

# ---- the module ------------------------------------------------------------------------


def build_module(
    circuit: Circuit, manifest: Manifest, registry: ContractRegistry, options: BuildOptions
) -> ModuleOp:
    manifest = hydrate(circuit, manifest.with_values(options.overrides))
    capacity = options.kv_capacity or default_kv_capacity(manifest)
    if options.prefill_tokens < 1 or capacity < 1:
        raise BuildError("<command line>", "--prefill-tokens and --kv-capacity must be positive")
    if max(options.prefill_tokens, capacity) > MAX_POSITIONS:
        # positions are int32 in the IR and in the C ABI (and in llama.cpp)
        raise BuildError("<command line>", f"--prefill-tokens and --kv-capacity must be at most "
                         f"{MAX_POSITIONS}")
    if circuit.kind == "decoder" and options.prefill_tokens > capacity:
        raise BuildError(
            "<command line>",
            f"{options.prefill_tokens} prefill tokens do not fit a KV "
            f"cache of {capacity} positions",
        )
    functions: list[Operation] = []
    used: set[str] = set()
    for phase in circuit.phases:
        tokens = options.prefill_tokens if phase == "prefill" else DECODE_TOKENS
        builder = FunctionBuilder(circuit, manifest, registry, phase, tokens, capacity,
                                  expand_layers=options.expand_layers,
                                  last_token_only=(phase == "prefill"
                                                   and last_token_only(circuit, options.prefill_logits)))
        functions += builder.build(phase)
        used |= builder.used_tensors
        if phase == "decode" and len(builder.attention_contracts) != 1:
            found = ", ".join(sorted(builder.attention_contracts)) or "none"
            raise BuildError(
                circuit.file,
                "a decoder must end with exactly one active decode "
                f"attention contract; this model activates: {found}",
            )
    _refuse_unused_tensors(manifest, used, circuit)
    module = ModuleOp(functions)
    module.attributes["v8.circuit"] = StringAttr(circuit.file)
    module.attributes["v8.manifest"] = manifest_attr(manifest, capacity)
    return module


def _refuse_unused_tensors(manifest: Manifest, used: set[str], circuit: Circuit) -> None:
    """A tensor the circuit never reads is arithmetic the build would silently drop."""
    if manifest.tensors is None:
        return
    unused = sorted(set(manifest.tensors) - used)
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        raise BuildError(
            manifest.file, f"{len(unused)} tensor(s) that {circuit.file} never reads: {shown}"
        )


def manifest_attr(manifest: Manifest, kv_capacity: int) -> DictionaryAttr:
    """The hydrated values, so a reader of the IR sees what the circuit was built with."""
    entries: dict[str, Attribute] = {
        "source": StringAttr(manifest.file),
        "architecture": StringAttr(manifest.architecture),
        "kv_capacity": IntegerAttr(kv_capacity, 64),
    }
    for name in FIELDS:
        value = manifest.get(name)
        if value is None:
            continue
        entries[name] = _value_attr(value)
    return DictionaryAttr(entries)


def _value_attr(value: ManifestValue) -> Attribute:
    match value:
        case bool():
            return IntegerAttr(int(value), IntegerType(1))
        case int():
            return IntegerAttr(value, 64)
        case float():
            return FloatAttr(value, Float32Type())
        case str():
            return StringAttr(value)
        case _:
            return ArrayAttr([IntegerAttr(v, 64) for v in value])


class ReusingPrinter(Printer):
    """xDSL's printer, printing each distinct attribute once: a model repeats the same
    contracts, types and locations on every layer, and the printer writes them a character
    at a time.  The text is the printer's own, so the output is byte for byte the same:
    equal xDSL attributes print alike (FloatData compares bits, so 0.0 and -0.0 differ)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream=stream, print_debuginfo=True)
        self._texts: dict[Attribute, str] = {}

    def print_attribute(self, attribute: Attribute) -> None:
        text = self._texts.get(attribute)
        if text is None:
            text = self._printed(attribute)
            if text is None:
                return  # printed across lines, straight to the stream
            self._texts[attribute] = text
        self.print_string(text)

    def _printed(self, attribute: Attribute) -> str | None:
        """The attribute's text, when it is one line (indentation then plays no part)."""
        stream, column = self.stream, self._current_column
        self.stream = StringIO()
        try:
            super().print_attribute(attribute)
            text = self.stream.getvalue()
        finally:
            self.stream, self._current_column = stream, column
        if "\n" in text:
            super().print_attribute(attribute)
            return None
        return text


def print_module(module: ModuleOp, stream: IO[str]) -> None:
    ReusingPrinter(stream).print_op(module)
    stream.write("\n")


# ---- command line -------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    assert __doc__ is not None  # the module docstring is the command's help
    parser = ArgumentParser(prog="v8-build", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a GGUF file or a config JSON")
    parser.add_argument(
        "--circuit", required=True, help="a family name (circuits/<name>.json) or a path"
    )
    parser.add_argument("--prefill-tokens", type=int, default=DEFAULT_PREFILL_TOKENS,
                        help="most tokens per prefill call (a decoder's count is a run-time "
                             "argument up to this)")
    parser.add_argument(
        "--kv-capacity",
        type=int,
        default=None,
        help="KV cache positions (default: context length capped at 4096 and at "
        "any sliding window)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a manifest value, e.g. kv_cache_dtype=f32",
    )
    parser.add_argument(
        "--registry",
        type=Path,
        action="append",
        default=None,
        help="contract registry files or folders (default: the packaged contracts/)",
    )
    parser.add_argument("--prefill-logits", choices=PREFILL_LOGITS, default="all",
                        help="a decoder's prefill result: every token's row, or the last token's "
                             "only (what generation after a prompt reads; the ops after the "
                             "circuit's output_rows node then run on one row), or auto: the last "
                             "token's where the circuit declares output_rows")
    parser.add_argument("--expand-layers", action="store_true",
                        help="build every layer's ops into its phase instead of one function per "
                             "distinct layer called once per layer (keep-checkpoints needs it)")
    parser.add_argument("-o", "--output", type=Path, default=None)
    return parser.parse_args(argv)


def build_from_file(model: Path, circuit_name: str, *, prefill_tokens: int = DEFAULT_PREFILL_TOKENS,
                    kv_capacity: int | None = None, overrides: Sequence[str] = (),
                    registry_paths: Sequence[Path] | None = None,
                    expand_layers: bool = False, prefill_logits: str = "all") -> ModuleOp:
    """The GraphIR module for a model file (GGUF or config JSON) and a circuit; every
    user error is a BuildError naming the file."""
    try:
        registry = load_registry(registry_paths)
    except DataError as e:
        raise BuildError(f"{e.file}:{e.json_path}", f"bad contract registry: {e.message}") from None
    try:
        circuit = load_circuit(circuit_name, registry)
    except DataError as e:
        raise BuildError(f"{e.file}:{e.json_path}", f"bad circuit: {e.message}") from None
    try:
        values = dict(parse_override(text) for text in overrides)
        manifest = read_manifest(model, circuit.key_prefix, circuit.config_section)
    except ManifestError as e:
        raise BuildError(str(model), str(e).removeprefix(f"{model}: ")) from None
    if prefill_logits not in PREFILL_LOGITS:
        raise BuildError("<command line>", f"prefill logits '{prefill_logits}' is none of "
                         f"{', '.join(PREFILL_LOGITS)}")
    module = build_module(circuit, manifest, registry, BuildOptions(prefill_tokens, kv_capacity, values,
                                                                  expand_layers, prefill_logits))
    try:
        module.verify()
    except VerifyException as e:  # a builder bug, not a user error: still no traceback
        raise BuildError(circuit.file, f"the built module does not verify: {e}") from None
    return module


def run(args: argparse.Namespace) -> None:
    module = build_from_file(args.model, args.circuit, prefill_tokens=args.prefill_tokens,
                             kv_capacity=args.kv_capacity, overrides=args.set,
                             registry_paths=args.registry, expand_layers=args.expand_layers,
                             prefill_logits=args.prefill_logits)
    if args.output is None:
        print_module(module, sys.stdout)
        return
    with args.output.open("w", encoding="utf-8") as stream:
        print_module(module, stream)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except BuildError as e:
        print(str(e), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
