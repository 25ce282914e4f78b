"""The GGUF header reader against gguf.GGUFReader: the same metadata and tensors for every
preset, and a located ManifestError (never a traceback) for a damaged file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader, GGUFValueType

from v8dialect.data.manifest import ManifestError, read_gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402


def reference(file: Path) -> tuple[dict[str, Any], dict[str, tuple[str, tuple[int, ...]]]]:
    """What the package's full reader makes of the file, in the manifest's terms."""
    reader = GGUFReader(file)
    raw: dict[str, Any] = {}
    for name, item in reader.fields.items():
        if item.types[0] == GGUFValueType.ARRAY and item.types[1] == GGUFValueType.STRING:
            raw[name] = [bytes(item.parts[i]).decode("utf-8", "replace") for i in item.data]
        elif item.types[0] == GGUFValueType.ARRAY:
            raw[name] = [item.parts[i].tolist()[0] for i in item.data]
        else:
            raw[name] = item.contents()
    tensors = {t.name: (t.tensor_type.name.lower(), tuple(int(d) for d in reversed(t.shape.tolist())))
               for t in reader.tensors}
    return raw, tensors


@pytest.mark.parametrize("preset", sorted(tiny_gguf.PRESETS))
def test_the_header_reader_agrees_with_gguf_reader(tmp_path: Path, preset: str) -> None:
    file = tiny_gguf.write(tiny_gguf.PRESETS[preset], tmp_path / f"{preset}.gguf")
    manifest = read_gguf(file)
    raw, tensors = reference(file)
    assert manifest.raw == raw
    assert manifest.tensors is not None
    assert {k: (t.dtype, t.shape) for k, t in manifest.tensors.items()} == tensors


@pytest.mark.parametrize("keep", [0, 3, 4, 10, 24, 100, 1000, -1])
def test_a_cut_file_is_a_manifest_error(tmp_path: Path, keep: int) -> None:
    data = tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep])
    with pytest.raises(ManifestError, match="cut.gguf: not a readable GGUF file"):
        read_gguf(cut)


def test_a_wrong_version_is_a_manifest_error(tmp_path: Path) -> None:
    data = bytearray(tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / "whole.gguf").read_bytes())
    data[4:8] = (7).to_bytes(4, "little")
    bad = tmp_path / "v7.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="version 7"):
        read_gguf(bad)
