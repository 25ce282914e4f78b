"""The command-line parser of every v8 tool: argparse, except that a usage error exits 1.

A malformed command line is bad input like any other: it gets a located message
(`<tool>: error: ...`, after the usage line) and exit status 1. argparse's own convention
is status 2, which would make a wrong flag look different from a wrong file to scripts and
to the fuzz suite that holds every tool to one rule.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

USAGE_ERROR = 1


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # the located line first, as every v8 diagnostic starts; the usage after it
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR)


def adopt(parser: argparse.ArgumentParser) -> None:
    """Give a parser built elsewhere (xDSL's driver makes its own) v8's usage errors."""
    parser.__class__ = ArgumentParser
