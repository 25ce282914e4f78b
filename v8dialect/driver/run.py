"""v8-run: build (once, cached) and run the program v8 makes from a GGUF file.

    v8-run model.gguf --circuit <family> --prompt "Hello" -n 32
    v8-run model.gguf --circuit <family> --tokens 1,2,3 -n 8 --threads 2

The prompt runs in micro-batches of at most --ubatch tokens (as llama.cpp's), returning the
last token's logits only where the circuit declares how llama.cpp selects that row (its
output_rows; every position's elsewhere), then -n tokens are decoded greedily (argmax).
Prints the generated token ids, the text when a tokenizer is available (llama.cpp's, reading
the same file vocabulary-only: the 'oracle' extra), and tokens/s for prefill and decode;
--profile builds the program with every kernel call timed (same bits) and adds, per phase, each
(node, kernel)'s calls and share of the phase's kernel time, over all layers.  The
first build of a program compiles C (tens of seconds for a large model); later runs reuse the
compiled code.  Errors are located and exit 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from v8dialect.diagnostics import V8Error
from v8dialect.driver.cli_args import ArgumentParser
from v8dialect.runtime.model_session import ModelSession, SessionError
from v8dialect.runtime.program import ProfileRow, profile_totals

NO_TOKENIZER = "(no tokenizer: install the 'oracle' extra to read and print text)"


class UsageError(Exception):
    pass


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    assert __doc__ is not None  # the module docstring is the command's help
    p = ArgumentParser(prog="v8-run", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="a GGUF file")
    p.add_argument("--circuit", required=True, help="a family name or a circuit file")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--tokens", help="prompt token ids, comma-separated")
    source.add_argument("--prompt", help="prompt text (needs llama.cpp's tokenizer)")
    p.add_argument("-n", "--n-predict", type=int, default=16, help="tokens to generate")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--kv-capacity", type=int, default=None,
                   help="KV cache positions (default: the circuit's from the file)")
    p.add_argument("--ubatch", type=int, default=512, help="prompt micro-batch size")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a manifest override for v8-build")
    p.add_argument("--profile", action="store_true",
                   help="time every kernel call and print where each phase's time went")
    return p.parse_args(argv)


def tokenizer(model: Path) -> Any | None:
    """The file's tokenizer, or None when the oracle extra is not installed."""
    from v8dialect.parity.llamacpp import OracleMissing, Vocabulary

    try:
        return Vocabulary(model)
    except OracleMissing:
        return None


def prompt_tokens(args: argparse.Namespace, vocab: Any | None) -> list[int]:
    if args.tokens is not None:
        try:
            ids = [int(t) for t in args.tokens.split(",") if t.strip()]
        except ValueError:
            raise UsageError(f"--tokens: expected comma-separated integers, got '{args.tokens}'") from None
    else:
        if vocab is None:
            raise UsageError(f"--prompt needs a tokenizer {NO_TOKENIZER}; or pass --tokens")
        ids = vocab.tokenize(args.prompt)
    if not ids:
        raise UsageError("the prompt has no tokens")
    return ids


def check_numbers(args: argparse.Namespace) -> None:
    for name in ("n_predict", "threads", "ubatch"):
        if getattr(args, name) < (0 if name == "n_predict" else 1):
            raise UsageError(f"--{name.replace('_', '-')}: out of range ({getattr(args, name)})")


def run(args: argparse.Namespace) -> None:
    if not args.model.is_file():
        raise UsageError("no such file")
    check_numbers(args)
    vocab = tokenizer(args.model)
    ids = prompt_tokens(args, vocab)
    if args.kv_capacity is not None and len(ids) + args.n_predict > args.kv_capacity:
        raise UsageError(f"{len(ids)} prompt + {args.n_predict} generated tokens exceed the KV "
                         f"capacity of {args.kv_capacity} (--kv-capacity)")
    first = min(len(ids), args.ubatch)
    print(f"v8-run: building the program for {first}-token prefill chunks (compiled once, then "
          "cached) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    # generation reads the prompt's last logits only: where the circuit says how llama.cpp
    # selects that row, the prefill computes it alone, as llama.cpp does when generating
    session = ModelSession.open(args.model, args.circuit, prefill_tokens=first,
                                kv_capacity=args.kv_capacity, overrides=args.set, name="v8_run",
                                prefill_logits="auto", profile=args.profile)
    rows = "the last token's logits" if session.last_token_prefill else "every position's logits"
    print(f"v8-run: ready in {time.perf_counter() - t0:.1f} s (prefill returns {rows})",
          file=sys.stderr, flush=True)
    vocab_size = session.program.phases["decode"].outputs[0].shape[-1]
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise UsageError(f"token ids {bad[:5]} are outside the vocabulary of {vocab_size}")
    try:
        generate(session, ids, args, vocab)
        if args.profile:
            print("\n".join(profile_table(session.profile())))
    finally:
        session.close()
        if vocab is not None:
            vocab.close()


def generate(session: ModelSession, ids: list[int], args: argparse.Namespace, vocab: Any | None) -> None:
    t0 = time.perf_counter()
    logits = session.prefill(ids, args.threads, args.ubatch)
    t_prefill = time.perf_counter() - t0
    out: list[int] = []
    t1 = time.perf_counter()
    for _ in range(args.n_predict):
        token = int(np.argmax(logits[-1]))
        out.append(token)
        if len(out) == args.n_predict:
            break
        logits = session.decode(token, args.threads).logits
    t_decode = time.perf_counter() - t1
    print("tokens:", ",".join(map(str, out)))
    print("text:", vocab.detokenize(out) if vocab is not None else NO_TOKENIZER)
    decode_steps = max(len(out) - 1, 0)
    print(f"prefill: {len(ids)} tokens in {t_prefill * 1e3:.1f} ms ({len(ids) / t_prefill:.1f} tokens/s); "
          f"decode: {decode_steps} steps in {t_decode * 1e3:.1f} ms"
          + (f" ({decode_steps / t_decode:.1f} tokens/s)" if decode_steps and t_decode > 0 else ""))


def profile_table(rows: Sequence[ProfileRow]) -> list[str]:
    """Per phase, each (node, kernel) over every layer that runs it: calls, milliseconds, share of
    the phase's kernel time; largest first."""
    lines: list[str] = []
    for phase in sorted({r.phase for r in rows}):
        totals = profile_totals(rows, phase)
        if not totals:
            continue
        spent = sum(seconds for _, seconds in totals.values())
        lines.append(f"profile of {phase}: {spent * 1e3:.2f} ms in kernels")
        lines.append(f"  {'node':<24} {'kernel':<40} {'calls':>7} {'ms':>9} {'share':>6}")
        for (node, kernel), (calls, seconds) in totals.items():
            lines.append(f"  {node:<24} {kernel:<40} {calls:>7} {seconds * 1e3:>9.3f} "
                         f"{seconds / spent if spent else 0.0:>6.1%}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (UsageError, SessionError, V8Error, ValueError, OSError, RuntimeError) as e:
        message = str(e)
        print(message if ": error: " in message else f"{args.model}: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
