"""The C ABI as the runtime headers declare it: the one source of truth.

``parse_headers`` preprocesses a set of headers (``gcc -E`` against a stand-in libc, so
no system or intrinsics header is read) and parses them with pycparser into functions
(name, return type, typed parameters), enum constants with their values, and the
typedefs and structs cffi needs.  ``cdef_for`` prints cffi declarations from that, so
no prototype or enum value is ever copied by hand.  Parses are cached per header set.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import re
import subprocess
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pycparser  # pyright: ignore[reportMissingTypeStubs]
from pycparser import c_ast, c_parser  # pyright: ignore[reportMissingTypeStubs]

from v8dialect.data.paths import runtime_c_dir, runtime_include_dir

# The stand-in libc: just the types and macros the runtime headers use.
_FAKE_LIBC: Mapping[str, str] = {
    "stddef.h": "typedef unsigned long size_t;\ntypedef long ptrdiff_t;\n#define NULL ((void *)0)\n",
    "stdint.h": "".join(f"typedef {c} {n};\n" for n, c in (
        ("int8_t", "signed char"), ("uint8_t", "unsigned char"), ("int16_t", "short"),
        ("uint16_t", "unsigned short"), ("int32_t", "int"), ("uint32_t", "unsigned int"),
        ("int64_t", "long"), ("uint64_t", "unsigned long"), ("intptr_t", "long"),
        ("uintptr_t", "unsigned long"))),
    "string.h": "", "math.h": "", "float.h": "", "stdlib.h": "", "immintrin.h": "",
}
_NO_EXTENSIONS = ("-D__attribute__(x)=", "-D__extension__=", "-D__restrict=", "-D__inline=inline")


class CAbiError(Exception):
    """A header the ABI reader cannot preprocess or parse."""


@dataclass(frozen=True)
class CParam:
    name: str
    ctype: str


@dataclass(frozen=True)
class CFunction:
    name: str
    returns: str
    params: tuple[CParam, ...]
    where: str  # header:line of the declaration

    def parameters(self) -> str:
        """The parameter list as C text: 'int contract, float *y, ...'."""
        return _param_list(self.params)

    def prototype(self) -> str:
        return f"{declarator(self.returns, self.name)}({self.parameters()});"


@dataclass(frozen=True)
class CEnum:
    tag: str  # "" for an anonymous enum
    typedef: str  # "" unless the enum is typedef'd
    constants: tuple[tuple[str, int], ...]

    def declaration(self) -> str:
        body = ", ".join(f"{name} = {value}" for name, value in self.constants)
        head = f"enum {self.tag} {{ {body} }}".replace("enum  ", "enum ")
        return f"typedef {head} {self.typedef};" if self.typedef else f"{head};"


@dataclass(frozen=True)
class CAbi:
    """What a header set declares: prototypes, enums and the type declarations, in order."""

    functions: Mapping[str, CFunction]
    enums: tuple[CEnum, ...]
    # in header order: ("", cffi-ready enum / struct / typedef text) or (function name, "")
    items: tuple[tuple[str, str], ...]

    @property
    def constants(self) -> dict[str, int]:
        return {name: value for enum in self.enums for name, value in enum.constants}


def declarator(ctype: str, name: str) -> str:
    """'float *' and 'y' as C writes them: 'float *y'."""
    return f"{ctype}{'' if ctype.endswith('*') or not name else ' '}{name}"


def _param_list(params: Sequence[CParam]) -> str:
    return ", ".join(declarator(p.ctype, p.name) for p in params) or "void"


def same_ctype(a: str, b: str) -> bool:
    """Equal C type spellings, whatever the spacing around '*'."""
    return re.sub(r"\s*\*\s*", "*", a.strip()) == re.sub(r"\s*\*\s*", "*", b.strip())


# ---- preprocessing --------------------------------------------------------------------


@cache
def _fake_libc_dir() -> Path:
    folder = tempfile.TemporaryDirectory(prefix="v8-c-abi-libc-")
    atexit.register(folder.cleanup)
    for name, text in _FAKE_LIBC.items():
        (Path(folder.name) / name).write_text(text, encoding="utf-8")
    return Path(folder.name)


def default_include_dirs() -> tuple[Path, ...]:
    return (runtime_include_dir(), runtime_c_dir())


def resolve_header(header: str | Path, include_dirs: Sequence[Path]) -> Path:
    path = Path(header)
    if path.is_absolute():
        return path
    for folder in include_dirs:
        if (folder / path).is_file():
            return folder / path
    raise CAbiError(f"header '{header}' not found under {', '.join(map(str, include_dirs))}")


def preprocess(headers: Sequence[Path], include_dirs: Sequence[Path]) -> str:
    unit = "".join(f'#include "{h}"\n' for h in headers)
    cmd = [os.environ.get("CC", "gcc"), "-E", "-nostdinc", "-std=c11", *_NO_EXTENSIONS,
           "-isystem", str(_fake_libc_dir()), *(f"-I{d}" for d in include_dirs), "-"]
    run = subprocess.run(cmd, input=unit, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise CAbiError(f"preprocessing {', '.join(map(str, headers))} failed:\n{run.stderr}")
    return run.stdout


# ---- reading the AST ------------------------------------------------------------------


def _field(node: object, name: str) -> Any:
    """An attribute of a pycparser node (the library is untyped)."""
    return getattr(node, name)


def render_type(node: object) -> str:
    """A declarator's type as C text: 'const float *', 'int64_t', 'v8_threadpool *'."""
    if isinstance(node, c_ast.PtrDecl | c_ast.ArrayDecl):
        inner = render_type(_field(node, "type"))
        quals = _field(node, "quals") if isinstance(node, c_ast.PtrDecl) else _field(node, "dim_quals")
        return f"{inner}{'' if inner.endswith('*') else ' '}*" + "".join(f" {q}" for q in quals)
    if isinstance(node, c_ast.TypeDecl):
        quals: list[str] = list(_field(node, "quals"))
        return " ".join([*quals, render_type(_field(node, "type"))])
    if isinstance(node, c_ast.IdentifierType):
        return " ".join(str(n) for n in _field(node, "names"))
    if isinstance(node, c_ast.Struct | c_ast.Enum):
        kind = "struct" if isinstance(node, c_ast.Struct) else "enum"
        return f"{kind} {_field(node, 'name')}"
    raise CAbiError(f"unsupported C type {type(node).__name__} at {_field(node, 'coord')}")


def _params(func: object) -> tuple[CParam, ...]:
    args = _field(func, "args")
    params: list[CParam] = []
    declared: list[object] = list(_field(args, "params")) if args is not None else []
    for param in declared:
        if isinstance(param, c_ast.EllipsisParam):
            params.append(CParam("", "..."))
            continue
        ctype = render_type(_field(param, "type"))
        if ctype == "void" and _field(param, "name") is None:
            continue
        params.append(CParam(str(_field(param, "name") or ""), ctype))
    return tuple(params)


def _function(decl: object) -> CFunction:
    func = _field(decl, "type")
    coord = _field(decl, "coord")
    return CFunction(str(_field(decl, "name")), render_type(_field(func, "type")), _params(func),
                     f"{_field(coord, 'file')}:{_field(coord, 'line')}")


def _c_quotient(a: int, b: int) -> int:
    """C's integer division, which truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


_BINARY: Mapping[str, Callable[[int, int], int]] = {
    "+": int.__add__, "-": int.__sub__, "*": int.__mul__, "<<": int.__lshift__,
    ">>": int.__rshift__, "|": int.__or__, "&": int.__and__, "^": int.__xor__,
    "/": _c_quotient, "%": lambda a, b: a - b * _c_quotient(a, b)}


def _evaluate(expr: object, known: Mapping[str, int]) -> int:
    """An integer constant expression as enumerators and array sizes write them."""
    if isinstance(expr, c_ast.Constant):
        text = str(_field(expr, "value")).rstrip("uUlL")
        return ord(text[1]) if text.startswith("'") else int(text, 0)
    if isinstance(expr, c_ast.ID):
        return known[str(_field(expr, "name"))]
    if isinstance(expr, c_ast.UnaryOp):
        value = _evaluate(_field(expr, "expr"), known)
        return {"-": -value, "+": value, "~": ~value, "!": int(not value)}[str(_field(expr, "op"))]
    if isinstance(expr, c_ast.BinaryOp):
        a, b = _evaluate(_field(expr, "left"), known), _evaluate(_field(expr, "right"), known)
        op = str(_field(expr, "op"))
        if op in ("/", "%") and b == 0:
            raise CAbiError(f"division by zero in a constant at {_field(expr, 'coord')}")
        return _BINARY[op](a, b)
    if isinstance(expr, c_ast.Cast):
        return _evaluate(_field(expr, "expr"), known)
    raise CAbiError(f"not an integer constant: {type(expr).__name__} at {_field(expr, 'coord')}")


def _enum(node: object, typedef: str, known: dict[str, int]) -> CEnum:
    constants: list[tuple[str, int]] = []
    value = -1
    for item in _field(_field(node, "values"), "enumerators"):
        expr = _field(item, "value")
        value = value + 1 if expr is None else _evaluate(expr, known)
        known[str(_field(item, "name"))] = value
        constants.append((str(_field(item, "name")), value))
    return CEnum(str(_field(node, "name") or ""), typedef, tuple(constants))


def _struct_body(node: object, known: Mapping[str, int]) -> str:
    fields: list[str] = []
    for member in _field(node, "decls"):
        decl_type = _field(member, "type")
        dims = ""
        while isinstance(decl_type, c_ast.ArrayDecl):
            dims += f"[{_evaluate(_field(decl_type, 'dim'), known)}]"
            decl_type = _field(decl_type, "type")
        fields.append(f"{declarator(render_type(decl_type), str(_field(member, 'name')))}{dims};")
    return " ".join(fields)


def _typedef(node: object, known: Mapping[str, int]) -> str:
    name = str(_field(node, "name"))
    target = _field(_field(node, "type"), "type")
    if isinstance(_field(node, "type"), c_ast.PtrDecl) and isinstance(target, c_ast.FuncDecl):
        return f"typedef {render_type(_field(target, 'type'))} (*{name})({_param_list(_params(target))});"
    if isinstance(target, c_ast.Struct):
        tag = _field(target, "name") or ""
        if _field(target, "decls") is None:
            return f"typedef struct {tag} {name};"
        return f"typedef struct {tag} {{ {_struct_body(target, known)} }} {name};".replace("  ", " ")
    return f"typedef {declarator(render_type(_field(node, 'type')), name)};"


def _from_fake_libc(node: object) -> bool:
    return str(_field(_field(node, "coord"), "file")).startswith(str(_fake_libc_dir()))


def read_ast(ast: c_ast.FileAST) -> CAbi:
    functions: dict[str, CFunction] = {}
    enums: list[CEnum] = []
    items: list[tuple[str, str]] = []
    known: dict[str, int] = {}
    for node in _field(ast, "ext"):
        if _from_fake_libc(node) or isinstance(node, c_ast.FuncDef):
            continue  # libc stand-ins and static inline helpers are not ABI
        inner = _field(node, "type")
        if isinstance(node, c_ast.Typedef) and isinstance(_field(inner, "type"), c_ast.Enum):
            enums.append(_enum(_field(inner, "type"), str(_field(node, "name")), known))
            items.append(("", enums[-1].declaration()))
        elif isinstance(node, c_ast.Typedef):
            items.append(("", _typedef(node, known)))
        elif isinstance(inner, c_ast.Enum):
            enums.append(_enum(inner, "", known))
            items.append(("", enums[-1].declaration()))
        elif isinstance(inner, c_ast.FuncDecl) and "static" not in _field(node, "storage"):
            function = _function(node)
            functions[function.name] = function
            items.append((function.name, ""))
    return CAbi(functions, tuple(enums), tuple(items))


# Part of the on-disk cache key: bump it whenever read_ast or the CAbi classes change.
PARSE_FORMAT = 1
# Where the stand-in libc sits in a preprocessed text; its folder differs in every process.
_LIBC_MARK = "<v8-fake-libc>"


@cache
def _parse_cached(headers: tuple[Path, ...], include_dirs: tuple[Path, ...]) -> CAbi:
    index = _sources_index(headers, include_dirs)
    known = _load_by_sources(index)
    if known is not None:
        return known
    text = preprocess(headers, include_dirs)
    stored = _stored_parse(text)
    abi = _load_parse(stored)
    if abi is None:
        try:
            ast = c_parser.CParser().parse(text, filename="<headers>")
        except c_parser.ParseError as e:
            raise CAbiError(f"cannot parse {', '.join(map(str, headers))}: {e}") from e
        abi = read_ast(ast)
        _save_parse(stored, abi)
    _save_sources(index, _included_files(text), stored)
    return abi


# ---- the sources index: a header set's parse without running the preprocessor ---------------
#
# Every program build checks each kernel map's header against its ABI; running gcc -E for each
# header set costs more than the rest of a compile.  The index of a header set lists every file
# its preprocessed text included, with a digest of its bytes, and the parse it gave: while every
# listed file still has its digest, the preprocessor would produce the same text.  The key
# holds the include path and the compiler, which decide which files are found.

_LINE_MARKER = re.compile(r'^# \d+ "([^"<][^"]*)"', re.MULTILINE)


def _sources_index(headers: tuple[Path, ...], include_dirs: tuple[Path, ...]) -> Path:
    from v8dialect.runtime.cbuild import cache_root

    h = hashlib.sha256(f"{PARSE_FORMAT}\0{pycparser.__version__}\0{os.environ.get('CC', 'gcc')}".encode())
    for part in (*headers, "\0", *include_dirs, "\0", *sorted(_FAKE_LIBC.items())):
        h.update(f"{part}\0".encode())
    return cache_root() / "c_abi" / f"sources-{h.hexdigest()[:32]}.json"


def _included_files(text: str) -> list[str]:
    libc = str(_fake_libc_dir())
    return sorted({m for m in _LINE_MARKER.findall(text) if not m.startswith(libc)})


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _load_by_sources(index: Path) -> CAbi | None:
    try:
        entry = json.loads(index.read_text(encoding="utf-8"))
        sources, parse = dict(entry["sources"]), Path(entry["parse"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if parse.parent != index.parent or any(_digest(f) != d for f, d in sources.items()):
        return None
    return _load_parse(parse)


def _save_sources(index: Path, files: list[str], parse: Path) -> None:
    digests = {f: _digest(f) for f in files}
    if None in digests.values():
        return
    staging = index.with_name(f".{index.name}.{os.getpid()}.tmp")
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps({"sources": digests, "parse": str(parse)}), encoding="utf-8")
        os.replace(staging, index)
    except OSError:
        staging.unlink(missing_ok=True)


def forget_parses() -> None:
    """Drop this process's parses (keyed by header paths), for a caller that edits headers;
    the on-disk cache is keyed by content and needs no such care."""
    _parse_cached.cache_clear()


def _stored_parse(text: str) -> Path:
    """The cache file of a header set's parse.  pycparser costs far more than gcc -E, so the
    key is the preprocessed text itself (every header byte it includes, with the line
    markers), with this reader's format and pycparser's version; never a file time."""
    from v8dialect.runtime.cbuild import cache_root

    h = hashlib.sha256(f"{PARSE_FORMAT}\0{pycparser.__version__}\0".encode())
    h.update(text.replace(str(_fake_libc_dir()), _LIBC_MARK).encode())
    return cache_root() / "c_abi" / f"{h.hexdigest()[:32]}.pickle"


def _load_parse(path: Path) -> CAbi | None:
    try:
        with path.open("rb") as f:
            abi = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        return None  # absent or unreadable: parse again
    return abi if isinstance(abi, CAbi) else None


def _save_parse(path: Path, abi: CAbi) -> None:
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with staging.open("wb") as f:
            pickle.dump(abi, f)
        os.replace(staging, path)  # published whole
    except OSError:
        staging.unlink(missing_ok=True)  # a read-only cache only costs the next parse


def _dirs(include_dirs: Sequence[Path]) -> tuple[Path, ...]:
    return tuple(Path(d) for d in include_dirs) or default_include_dirs()


def parse_headers(headers: Sequence[str | Path], include_dirs: Sequence[Path] = ()) -> CAbi:
    """The ABI a header set declares (headers relative to the include dirs, or absolute)."""
    return _parse_cached(tuple(resolve_header(h, _dirs(include_dirs)) for h in headers), _dirs(include_dirs))


FunctionFilter = Collection[str] | Callable[[str], bool] | None


def _every(_name: str) -> bool:
    return True


def _accepts(functions: FunctionFilter, abi: CAbi, headers: Sequence[str | Path]) -> Callable[[str], bool]:
    if functions is None or callable(functions):
        return functions or _every
    missing = sorted(set(functions) - set(abi.functions))
    if missing:
        raise CAbiError(f"{', '.join(missing)} not declared in {', '.join(map(str, headers))}")
    return set(functions).__contains__


def cdef_for(headers: Sequence[str | Path], functions: FunctionFilter = None,
             include_dirs: Sequence[Path] = ()) -> str:
    """cffi declarations for a header set: every enum (with its values) and type, and the
    prototypes `functions` names or accepts (every non-static one when None)."""
    abi = parse_headers(headers, include_dirs)
    wanted = _accepts(functions, abi, headers)
    lines = [text or abi.functions[name].prototype() for name, text in abi.items
             if text or wanted(name)]
    return "\n".join(lines) + "\n"


def declared_in(header: str | Path, include_dirs: Sequence[Path] = ()) -> list[str]:
    """The functions `header` itself declares (not those of the headers it includes)."""
    path = resolve_header(header, _dirs(include_dirs)).resolve()
    functions = parse_headers([path], include_dirs).functions.values()
    return [f.name for f in functions if Path(f.where.rsplit(":", 1)[0]).resolve() == path]


def constants(headers: Sequence[str | Path], include_dirs: Sequence[Path] = ()) -> dict[str, int]:
    """Every enum constant the header set defines, by name."""
    return parse_headers(headers, include_dirs).constants
