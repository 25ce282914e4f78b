"""v8-parity: does the program v8 builds from a GGUF file reproduce llama.cpp on that file?

    v8-parity model.gguf --circuit qwen3 --prompt-len 16 --decode 16 --threads 1,2 --repack on

Runs llama.cpp (llama-cpp-python, flash attention, fp16 KV cache) and the v8 program on the
same file and the same tokens, and prints per position: bit-exact, or the number of
differing logits, max |Δ|, ulps and both argmaxes.  On the first divergence it rebuilds the
program with every op's output kept, replays llama.cpp with its eval callback, and names the
first op whose output differs: layer, node, contract, provider, max |Δ| and the first
differing index.  Exit 0 iff every position of every run is bit-exact; 1 on a divergence or
an error (located, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from v8dialect.diagnostics import V8Error
from v8dialect.driver.cli_args import ArgumentParser
from v8dialect.parity.llamacpp import LlamaCppModel, OracleMissing, oracle_info
from v8dialect.parity.run import ParityCase, ParityResult, describe_rows, run_parity, seeded_tokens
from v8dialect.runtime.host import HostError, ggml_build_of_system_info
from v8dialect.runtime.model_session import SessionError


class UsageError(Exception):
    pass


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{what}: expected comma-separated integers, got '{text}'") from None
    if not values:
        raise UsageError(f"{what}: empty list")
    return values


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    assert __doc__ is not None  # the module docstring is the command's help
    p = ArgumentParser(prog="v8-parity", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path, help="a GGUF file llama.cpp can load")
    p.add_argument("--circuit", required=True, help="a family name or a circuit file")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--tokens", help="prompt token ids, comma-separated")
    prompt.add_argument("--prompt-len", type=int, default=16, help="a seeded prompt of N tokens")
    p.add_argument("--decode", type=int, default=4, help="decode steps after the prompt")
    p.add_argument("--threads", default="1", help="thread counts to run, e.g. 1,2")
    p.add_argument("--repack", choices=("on", "off", "both"), default="on",
                   help="llama.cpp's weight repacking (its default is on)")
    p.add_argument("--kv-capacity", type=int, default=1024)
    p.add_argument("--ubatch", type=int, default=512,
                   help="micro-batch: a longer prompt runs in chunks of this many tokens")
    p.add_argument("--seed", type=int, default=0, help="seed of the token ids")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a manifest override for v8-build")
    p.add_argument("--position-streams", action="store_true",
                   help="multi-section RoPE: four distinct position streams, llama.cpp fed the "
                        "token embedding rows (a token batch gives every stream one position)")
    p.add_argument("--prefill-logits", choices=("all", "last"), default="all",
                   help="compare every prompt position's logits, or each prefill call's last "
                        "(both engines then compute that row alone from the circuit's "
                        "output_rows node on, as llama.cpp does for generation)")
    p.add_argument("--no-locate", action="store_true", help="skip naming the first differing op")
    p.add_argument("--json", type=Path, help="also write the results as JSON")
    return p.parse_args(argv)


def cases(args: argparse.Namespace, vocab: int) -> list[ParityCase]:
    if args.tokens is not None:
        prompt = tuple(int_list(args.tokens, "--tokens"))
    else:
        if args.prompt_len < 1:
            raise UsageError("--prompt-len: at least one token")
        prompt = seeded_tokens(args.seed, args.prompt_len, vocab)
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise UsageError(f"--tokens: ids {bad[:5]} are outside the vocabulary of {vocab}")
    if args.decode < 0:
        raise UsageError("--decode: not negative")
    decode = seeded_tokens(args.seed + 1, args.decode, vocab)
    threads = int_list(args.threads, "--threads")
    if any(t < 1 for t in threads):
        raise UsageError("--threads: at least 1")
    repacks = {"on": (True,), "off": (False,), "both": (True, False)}[args.repack]
    if args.ubatch < 1:
        raise UsageError("--ubatch: at least 1")
    if len(prompt) + len(decode) > args.kv_capacity:
        raise UsageError(f"{len(prompt)} prompt + {len(decode)} decode tokens exceed "
                         f"--kv-capacity {args.kv_capacity}")
    if args.prefill_logits == "last" and args.position_streams:
        raise UsageError("--prefill-logits last: llama.cpp is fed embedding rows with "
                         "--position-streams, and v8-parity compares their every row")
    build = ggml_build_of_system_info(oracle_info().system_info)
    loop_vectors = reference_loop_vectors()
    return [ParityCase(args.model, args.circuit, prompt, decode, t, r, args.kv_capacity,
                       tuple(args.set), args.position_streams, args.ubatch, build, loop_vectors,
                       args.prefill_logits)
            for r in repacks for t in threads]


def reference_loop_vectors() -> str:
    """How the compiler of the llama.cpp that runs vectorized ggml's small loops, read off its
    own libggml: the v8 build then names the same form even if llama.cpp was built elsewhere."""
    from v8dialect.parity.ggml_ops import GgmlOps

    return GgmlOps(mem_bytes=1 << 22).loop_vectors()


def report(result: ParityResult, out: Any) -> None:
    c = result.case
    print(f"== {c.model.name} circuit {c.circuit}: threads {c.threads}, repack "
          f"{'on' if c.repack else 'off'}, prompt {len(c.prompt)}"
          f"{' (last logits)' if c.prefill_logits == 'last' else ''}, decode {len(c.decode)}", file=out)
    for line in describe_rows(result.rows):
        print(line, file=out)
    exact = sum(r.diff.exact for r in result.rows)
    print(f"bit-exact positions: {exact}/{len(result.rows)}", file=out)
    loc = result.located
    if loc is not None:
        print(f"first differing op (call {loc.call}, {loc.phase}): node '{loc.node}' contract "
              f"'{loc.contract}' provider '{loc.provider}': {loc.diff.describe()} "
              f"[{loc.compared - 1} earlier ops bit-exact]", file=out)
        if loc.caveat:
            print(f"  note: {loc.caveat}", file=out)
    elif result.first_divergent_call() is not None and not result.unmatched:
        print("first differing op: not found among the compared ops", file=out)
    if result.unmatched and loc is None:
        print(f"  ops without a llama.cpp tensor: {', '.join(result.unmatched)}", file=out)


def as_json(result: ParityResult) -> dict[str, Any]:
    c = result.case
    return {
        "model": str(c.model), "circuit": c.circuit, "threads": c.threads, "repack": c.repack,
        "position_streams": c.position_streams, "overrides": list(c.overrides),
        "ubatch": c.ubatch, "prefill_logits": c.prefill_logits,
        "prompt": list(c.prompt), "decode": list(c.decode), "exact": result.exact,
        "positions": [{"call": r.call, "phase": r.phase, "position": r.position,
                       "exact": r.diff.exact, "max_abs": r.diff.max_abs,
                       "max_ulps": r.diff.max_ulps, "argmax": [r.argmax_ours, r.argmax_reference]}
                      for r in result.rows],
        "located": None if result.located is None else {
            **{k: v for k, v in asdict(result.located).items() if k != "diff"},
            "max_abs": result.located.diff.max_abs, "max_ulps": result.located.diff.max_ulps,
            "first_index": result.located.diff.first_index},
    }


def run(args: argparse.Namespace) -> bool:
    if not args.model.is_file():
        raise UsageError(f"{args.model}: error: no such file")
    results: list[ParityResult] = []
    models: dict[bool, LlamaCppModel] = {}
    try:
        for case in cases(args, vocab_size(args.model)):
            if case.repack not in models:
                models[case.repack] = LlamaCppModel(case.model, case.repack)
            result = run_parity(case, models[case.repack], not args.no_locate)
            report(result, sys.stdout)
            results.append(result)
    finally:
        for model in models.values():
            model.close()
    if args.json is not None:
        doc = {"oracle": oracle_info().as_dict(), "runs": [as_json(r) for r in results]}
        args.json.write_text(json.dumps(doc, indent=1))
    return all(r.exact for r in results)


def vocab_size(model: Path) -> int:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(model))
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise UsageError(f"{model}: error: not a readable GGUF file ({exc})") from None
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise UsageError(f"{model}: error: no tokenizer.ggml.tokens (llama.cpp needs a vocabulary)")
    return len(field.data)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return 0 if run(args) else 1
    except (UsageError, SessionError, OracleMissing, HostError, ValueError, V8Error, OSError,
            RuntimeError) as e:
        message = str(e)
        if ": error: " not in message:
            message = f"{args.model}: error: {message}"
        print(message, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
