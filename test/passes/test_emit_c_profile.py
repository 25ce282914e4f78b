"""The profiled printer's site table names each site with C string literals that say exactly
the name: quotes, backslashes, question marks (trigraphs) and non-ASCII are escaped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from v8passes.emit_c import c_string

NAMES = ["attn_q", 'a"b', "back\\slash", "??=trigraph", "tab\there", "naïve"]


@pytest.mark.parametrize("name", NAMES)
def test_a_name_prints_as_a_literal_of_itself(name: str, tmp_path: Path) -> None:
    source = tmp_path / "s.c"
    source.write_text("#include <stdio.h>\nint main(void) { fputs(" + c_string(name)
                      + ", stdout); return 0; }\n")
    build = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(tmp_path / "s"),
                            str(source)], capture_output=True, text=True, timeout=60)
    assert build.returncode == 0, build.stderr
    printed = subprocess.run([str(tmp_path / "s")], capture_output=True, timeout=60).stdout
    assert printed == name.encode()
