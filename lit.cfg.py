# lit configuration: `lit test/` runs every *.mlir regression test with FileCheck.
# Python tests under test/ are pytest's (see README), not lit's.
import os
import sys

import lit.formats

config.name = "v8"  # noqa: F821 - lit injects `config`
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Inputs", "examples", "runtime_c", ".venv", "build"]

# v8-opt, xdsl-opt and filecheck from the interpreter's environment
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
# a PYTHONPATH (a source tree tested without installing it) reaches the tools too
if "PYTHONPATH" in os.environ:
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%fixture_maps", os.path.join(config.test_source_root, "test", "Inputs", "kernel_maps")))
config.substitutions.append(("%examples", os.path.join(config.test_source_root, "examples")))
config.substitutions.append(
    ("V8_ROUNDTRIP", "v8-opt %s --split-input-file | v8-opt --split-input-file | filecheck %s")
)
config.substitutions.append(
    (
        "V8_GENERIC_ROUNDTRIP",
        "v8-opt %s --split-input-file --print-op-generic | v8-opt --split-input-file --print-op-generic"
        " | filecheck %s --check-prefix=GENERIC",
    )
)
