"""v8-opt: xdsl-opt with the v8 dialect, passes, mlir-opt style pass flags and located errors.

    v8-opt --resolve-contracts file.mlir
    v8-opt -p 'resolve-contracts{mode="production"}' file.mlir

Every op parsed from a file gets a ``file:line:col`` location (unless it has
an explicit ``loc``), so verifier and pass errors point into the source.  A
user error prints ``file:line:col: error: ...`` on stderr and exits 1; no
traceback.
"""

from __future__ import annotations

import argparse
import io
import struct
import sys
from collections.abc import Callable, Sequence
from typing import IO

from v8passes import get_all_passes
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from v8dialect.diagnostics import EXCERPT_WIDTH, V8Error, located, op_error
from v8dialect.driver.cli_args import adopt
from v8dialect.driver.textguard import LocatingParser, check_string_literals, decode_source
from v8dialect.driver.universe import V8_UNIVERSE
from v8dialect.ir.structure import check_structure

# xDSL's wording for errors a user's input causes, and what v8 says instead.
INTERNAL_WORDING = (
    ("Operation using value defined out of its IsolatedFromAbove parent",
     "uses a value defined outside its function"),
    ("'block' property of Region class is only available for single-block regions",
     "expects a region of exactly one block"),
)


def user_wording(message: str) -> str:
    for internal, wording in INTERNAL_WORDING:
        if internal in message:
            return wording
    return message


def verify_located(module: ModuleOp) -> None:
    """Check the module's structure, then verify op by op so a failure names the op's
    source location."""
    check_structure(module)
    errors: list[str] = []
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            message = str(e).split("\n", 1)[0].removeprefix("Operation does not verify: ")
            errors.append(op_error(op, user_wording(message)))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, struct.error) as e:
            # A verifier that trips over a malformed op is still a verification failure of that op.
            errors.append(op_error(op, user_wording(str(e).split("\n", 1)[0])))
    if errors:
        raise V8Error(errors)


# struct format letters xDSL packs integer arrays with ('i' format requires ...).
STRUCT_BITS = {"b": 8, "h": 16, "i": 32, "q": 64}


def unparsable(parser: Parser, error: Exception) -> ParseError:
    """A located parse error for an exception xDSL's parser lets escape on bad input."""
    match error:
        case RecursionError():
            message = "input nests too deeply"
        case struct.error() if (bits := STRUCT_BITS.get(str(error)[1:2])) is not None:
            message = (f"integer out of range for i{bits} "
                       f"({-(1 << (bits - 1))} .. {(1 << (bits - 1)) - 1})")
        case _:
            message = user_wording(str(error).split("\n", 1)[0]) or type(error).__name__
    return ParseError(parser._current_token.span, message)  # pyright: ignore[reportPrivateUsage]


def parse_error_text(error: ParseError) -> str:
    where = error.span.get_location()
    context = error.span.print_with_context().split("\n", 1)[1].rstrip("\n")
    # A one-line input of a megabyte would otherwise be echoed whole, twice.
    context = "\n".join(line if len(line) <= EXCERPT_WIDTH else line[: EXCERPT_WIDTH - 3] + "..."
                         for line in context.split("\n"))
    return located(f"{where.file}:{where.line}:{where.col}", error.msg.strip(), context)


def split_pass_flags(argv: Sequence[str], names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Turn mlir-opt style `--pass[=opts]` flags into pipeline specs, keeping their order.

    Done before argparse so `--resolve-contracts file.mlir` never swallows the file name.
    """
    specs: list[str] = []
    rest: list[str] = []
    for arg in argv:
        flag, eq, opts = arg.partition("=")
        if flag.startswith("--") and flag[2:] in names:
            specs.append(f"{flag[2:]}{{{opts}}}" if eq else flag[2:])
        else:
            rest.append(arg)
    return specs, rest


class PendingOutput(io.StringIO):
    """Output held back until the whole run succeeded, so a failure leaves no partial file."""

    def close(self) -> None:  # xDSL closes its output stream in a `finally`
        pass


class V8OptMain(xDSLOptMain):
    def __init__(self, args: Sequence[str] | None = None) -> None:
        argv = sys.argv[1:] if args is None else list(args)
        self.flag_passes, rest = split_pass_flags(argv, list(get_all_passes()))
        self.pending: PendingOutput | None = None
        super().__init__(description="v8 numerical-contract compiler driver", args=rest)

    def prepare_output(self) -> IO[str]:
        if self.args.output_file is None:
            return sys.stdout
        self.pending = PendingOutput()
        return self.pending

    def run(self) -> None:
        super().run()
        if self.pending is not None:
            with open(self.args.output_file, "w", encoding="utf-8") as out:
                out.write(self.pending.getvalue())

    # The plugin universe is the one list of what v8 adds; xDSL may already have loaded it
    # through the entry point, so only what is missing is registered here.
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in V8_UNIVERSE.all_dialects.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in V8_UNIVERSE.all_passes.items():
            if name not in self.available_passes:
                self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets.update(V8_UNIVERSE.all_targets)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        adopt(arg_parser)  # usage errors exit 1, located, like all bad input
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument("--verify-each", action="store_true",
                                help="verify the module before and after every pass, not only "
                                     "after parsing and after the last pass")
        group = arg_parser.add_argument_group("v8 passes (mlir-opt style flags)")
        for name in get_all_passes():
            group.add_argument(f"--{name}", action="store_true",
                               help=f"run {name}; options as --{name}='key=value other=value'")

    def setup_pipeline(self) -> None:
        if self.flag_passes:
            if self.args.passes:
                raise V8Error(["<command line>: error: use either -p or --<pass> flags, not both"])
            self.args.passes = ",".join(self.flag_passes)
        super().setup_pipeline()
        xdsl_callback = self.pipeline.callback
        if xdsl_callback is None or self.args.verify_each:
            return

        # parse_chunk verified the input, and every v8 pass checks what it owes (V8Pass), so the
        # module is verified once more after the last pass, not before and between them: each
        # verification walks every op of a model (a fifth of a 28-layer compile).
        def verify_at_the_end(previous: ModulePass | None, module: ModuleOp,
                              following: ModulePass | None) -> None:
            skip = following is not None and not self.args.disable_verify
            self.args.disable_verify = self.args.disable_verify or skip
            try:
                xdsl_callback(previous, module, following)
            finally:
                self.args.disable_verify = self.args.disable_verify and not skip

        self.pipeline = PassPipeline(self.pipeline.passes, verify_at_the_end)

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        if (self.args.frontend or file_extension) != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        name = self.get_input_name()
        text = decode_source(chunk.read(), name, start_offset)
        check_string_literals(text, name)
        parser = LocatingParser(self.ctx, text, name, line_offset=start_offset)
        try:
            module = parser.parse_module(not self.args.no_implicit_module)
        except (ParseError, DiagnosticException):
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                RecursionError, struct.error) as e:
            raise unparsable(parser, e) from None
        if not self.args.disable_verify:
            verify_located(module)
        return module


def _report(error: BaseException) -> None:
    match error:
        case ParseError():
            text = parse_error_text(error)
        case V8Error():
            text = str(error)
        case OSError(filename=str() as name) if name:  # the input or output file itself
            text = f"{name}: error: {error.strerror or error}"
        case _:  # nothing narrower to point at than the command line
            text = f"v8-opt: error: {str(error).strip()}"
    print(text, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    run: Callable[[], None] = lambda: V8OptMain(args=argv).run()  # noqa: E731
    try:
        run()
    except (DiagnosticException, ParseError, ArgSpecParseError, OSError, ValueError) as e:
        _report(e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
