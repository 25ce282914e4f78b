"""Compile C through cffi, cached by content hash.

Tests, benchmarks and ``v8dialect.runtime.program`` all compile runtime_c sources (and
emitted C) with this one helper.  The cache key covers the cdef, every source
and header byte, the flags and the compiler, so a changed kernel is never run
from a stale build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from v8dialect.data.c_abi import FunctionFilter, cdef_for, parse_headers
from v8dialect.data.paths import runtime_c_dir, runtime_include_dir

# Baseline flags: no -march, so the objects run on any x86-64; ISA-specific
# regions opt in with target pragmas and dispatch at run time.
BASE_CFLAGS: tuple[str, ...] = ("-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC")
# A generated program is a straight line of kernel calls (the arithmetic lives in the kernels'
# objects) plus the printer's small elementwise loops: GCC's -O2 passes over one function of a
# thousand calls cost twice what -O1's do and buy nothing there.  No -O level changes a result:
# GCC keeps IEEE semantics at every level, and the program turns contraction off itself.
# -fexpensive-optimizations is the part of -O2 that GCC gates vzeroupper on: without it the
# printer's AVX-512/AVX2 loops (residual add, GLU) return with the vector registers' upper
# halves in use, and until some kernel clears them every switch between legacy-SSE code and VEX
# code (baseline C calling libm's sincosf or tanhf) costs about 70 ns on Intel Xeon (a small
# model's 64-token prefill took 1.8x as long).
PROGRAM_CFLAGS: tuple[str, ...] = ("-O1", "-fexpensive-optimizations", *BASE_CFLAGS[1:])

# The cffi module itself (the bindings and, for a model, the emitted program) gets line tables
# only: full -g makes GCC track every variable through one very long emitted function, which
# cost more than the rest of the compile.  Kernel sources keep Python's flags (-g included).
MODULE_DEBUG_FLAGS: tuple[str, ...] = ("-g1",)

RUNTIME_CORE_SOURCES: tuple[str, ...] = (
    "core/status.c",
    "core/fp16.c",
    "core/cpu.c",
    "core/expf.c",
    "core/threadpool.c",
)

RUNTIME_CORE_HEADERS: tuple[str, ...] = ("v8_runtime.h",)


def runtime_cdef(*headers: str, functions: FunctionFilter = None) -> str:
    """cffi declarations read from runtime_c headers: the runtime core's, then every enum and
    type of `headers` and the prototypes `functions` selects (all when None; a name that no
    header declares is an error)."""
    core = set(parse_headers(RUNTIME_CORE_HEADERS).functions)
    selected = functions

    def core_or_selected(name: str) -> bool:
        return name in core or (callable(selected) and selected(name))

    if functions is None or callable(functions):
        wanted: FunctionFilter = functions and core_or_selected
    else:
        wanted = {*core, *functions}
    return cdef_for([*RUNTIME_CORE_HEADERS, *headers], functions=wanted)


def sanitize_flags() -> tuple[str, ...]:
    """``V8_SANITIZE=address,undefined`` builds every extension with those sanitizers (any
    UBSan finding aborts); the process then needs the ASan runtime preloaded, as
    `make test-sanitize` does.  Part of the cache key, so sanitized and plain builds never mix."""
    wanted = os.environ.get("V8_SANITIZE", "").strip()
    if not wanted:
        return ()
    return (f"-fsanitize={wanted}", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all", "-g")


def cache_root() -> Path:
    configured = os.environ.get("V8_BUILD_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "v8" / "cffi"


@dataclass(frozen=True)
class CBuild:
    """One cffi extension: declarations, C source text and runtime_c sources."""

    name: str
    cdef: str
    source: str
    runtime_sources: Sequence[str] = RUNTIME_CORE_SOURCES
    extra_sources: Sequence[Path] = ()
    include_dirs: Sequence[Path] = field(default_factory=tuple)
    cflags: Sequence[str] = BASE_CFLAGS
    # A generated program, compiled into an object of its own (cached by content, as the kernels
    # are) with PROGRAM_CFLAGS; `source` then only declares what the extension calls in it.
    program: str | None = None

    def sources(self) -> list[Path]:
        root = runtime_c_dir()
        return [root / s for s in self.runtime_sources] + [Path(p) for p in self.extra_sources]

    def all_include_dirs(self) -> list[Path]:
        return [runtime_include_dir(), runtime_c_dir(), *map(Path, self.include_dirs)]

    def compile_flags(self) -> list[str]:
        return [*self.cflags, *sanitize_flags()]

    def digest(self) -> str:
        h = hashlib.sha256()
        program_flags = PROGRAM_CFLAGS if self.program is not None else ()
        for part in (self.name, self.cdef, self.source, self.program or "",
                     " ".join((*self.compile_flags(), *MODULE_DEBUG_FLAGS, *program_flags))):
            h.update(part.encode())
            h.update(b"\0")
        h.update(os.environ.get("CC", "gcc").encode())
        h.update(sysconfig.get_config_var("EXT_SUFFIX").encode())
        for path in self.sources():
            h.update(path.read_bytes())
        h.update(self.headers_digest().encode())
        return h.hexdigest()[:20]

    def headers_digest(self) -> str:
        """Every header and .inc under the include dirs, by relative name and content."""
        h = hashlib.sha256()
        for inc in self.all_include_dirs():
            for header in sorted(inc.rglob("*.h")) + sorted(inc.rglob("*.inc")):
                h.update(str(header.relative_to(inc)).encode())
                h.update(header.read_bytes())
        return h.hexdigest()


def build(spec: CBuild) -> ModuleType:
    """Compile (or reuse) the extension and import it; returns the module with .ffi and .lib."""
    module_name = f"_{spec.name}_{spec.digest()}"
    out_dir = cache_root() / module_name
    built = sorted(out_dir.glob(f"{module_name}*.so"))
    if not built:
        built = [_compile(spec, module_name, out_dir)]
    return _import(module_name, built[0])


def compiler_command() -> list[str]:
    """The compiler and flags setuptools compiles an extension's sources with (its
    customize_compiler: $CC or Python's CC, Python's CFLAGS, then $CFLAGS and $CPPFLAGS)."""
    cc = os.environ.get("CC") or str(sysconfig.get_config_var("CC"))
    cflags = [str(sysconfig.get_config_var("CFLAGS") or ""), os.environ.get("CFLAGS", ""),
              os.environ.get("CPPFLAGS", ""), str(sysconfig.get_config_var("CCSHARED") or "")]
    return [*shlex.split(cc), *shlex.split(" ".join(cflags))]


class CompileError(Exception):
    """A runtime source did not compile; the message holds the command and GCC's output."""


def object_digest(spec: CBuild, source: Path, headers: str, flags: Sequence[str] | None = None) -> str:
    """What an object file depends on: compiler, flags, include dirs, their headers' content
    and the source's content (never a modification time)."""
    h = hashlib.sha256()
    for part in (*compiler_command(), *(spec.compile_flags() if flags is None else flags),
                 *map(str, spec.all_include_dirs()), headers, source.name):
        h.update(part.encode())
        h.update(b"\0")
    h.update(source.read_bytes())
    return h.hexdigest()[:24]


def cached_object(spec: CBuild, source: Path, headers: str, flags: Sequence[str] | None = None) -> Path:
    """The object of one runtime source, compiled once per content and flags and shared by every
    extension that links it, so a new program compiles only its own C."""
    flags = spec.compile_flags() if flags is None else flags
    out_dir = cache_root() / "objects"
    obj = out_dir / f"{source.stem}-{object_digest(spec, source, headers, flags)}.o"
    if obj.is_file():
        return obj
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".{obj.name}.{os.getpid()}.tmp"
    includes = [f"-I{d}" for d in spec.all_include_dirs()]
    command = [*compiler_command(), *includes, "-c", str(source), "-o", str(staging), *flags]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        staging.unlink(missing_ok=True)
        raise CompileError(f"{' '.join(command)}\n{done.stderr}")
    os.replace(staging, obj)  # published whole: a concurrent build sees the old state or this
    return obj


def _compile(spec: CBuild, module_name: str, out_dir: Path) -> Path:
    from cffi import FFI

    out_dir.mkdir(parents=True, exist_ok=True)
    headers = spec.headers_digest()
    objects = [cached_object(spec, source, headers) for source in spec.sources()]
    if spec.program is not None:
        objects.append(program_object(spec, headers))
    ffi = FFI()
    ffi.cdef(spec.cdef)
    ffi.set_source(
        module_name,
        spec.source,
        extra_objects=[str(o) for o in objects],
        include_dirs=[str(p) for p in spec.all_include_dirs()],
        extra_compile_args=[*spec.cflags, *MODULE_DEBUG_FLAGS, *sanitize_flags()],
        extra_link_args=list(sanitize_flags()),
        libraries=["m", "pthread"],
    )
    # cffi writes into tmpdir; compile in a private folder then publish the .so
    staging = out_dir / f"staging-{os.getpid()}"
    path = Path(ffi.compile(tmpdir=str(staging), verbose=False))
    final = out_dir / path.name
    os.replace(path, final)
    return final


def program_object(spec: CBuild, headers: str) -> Path:
    """The generated program's object: its text is kept under the cache by content, so the same
    program (a model rebuilt, a second session) is compiled once."""
    assert spec.program is not None
    text = spec.program.encode()
    folder = cache_root() / "programs"
    source = folder / f"{spec.name}-{hashlib.sha256(text).hexdigest()[:24]}.c"
    if not source.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".{source.name}.{os.getpid()}.tmp"
        staging.write_bytes(text)
        os.replace(staging, source)  # published whole
    return cached_object(spec, source, headers, [*PROGRAM_CFLAGS, *sanitize_flags()])


def _import(module_name: str, path: Path) -> ModuleType:
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load compiled module {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module
    return module


def runtime_core() -> ModuleType:
    """The runtime foundations alone (fp16, CPU features, threadpool)."""
    return build(CBuild(name="v8_runtime_core", cdef=runtime_cdef(),
                        source='#include "v8_runtime.h"\n'))
