"""v8dialect.runtime.host: the ggml build class of a CPU and of a libggml's system-info line."""

from __future__ import annotations

from pathlib import Path

import pytest

from v8dialect.runtime.host import (
    LOOP_VECTORS,
    HostError,
    cpu_flags,
    ggml_build_of_system_info,
    native_ggml_build,
    native_loop_vectors,
    probe_loop_vectors,
)

ZEN3 = frozenset(["fpu", "sse2", "avx", "fma", "f16c", "bmi1", "avx2", "bmi2"])
SAPPHIRE = ZEN3 | {"avx512f", "avx512bw", "avx512_fp16"}


def test_native_build_follows_avx512f() -> None:
    assert native_ggml_build(SAPPHIRE) == "avx512"
    assert native_ggml_build(ZEN3) == "avx2"


@pytest.mark.parametrize("missing", ["avx2", "fma", "f16c"])
def test_a_cpu_without_the_avx2_build_features_is_refused(missing: str) -> None:
    with pytest.raises(HostError, match="set ggml_build to one of avx512, avx2"):
        native_ggml_build(ZEN3 - {missing})


def test_system_info_lines() -> None:
    avx2 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | LLAMAFILE = 1 | REPACK = 1 |"
    avx512 = "CPU : AVX2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_BF16 = 1 | OPENMP = 1 |"
    assert ggml_build_of_system_info(avx2) == "avx2"
    assert ggml_build_of_system_info(avx512) == "avx512"
    with pytest.raises(HostError, match="neither AVX512 nor AVX2"):
        ggml_build_of_system_info("CPU : NEON = 1 | ARM_FMA = 1 |")


@pytest.mark.parametrize(("flags", "form", "needs"), [
    (("-O3", "-march=x86-64-v4"), "min_8_lanes", "avx512f"),  # AVX-512, generic tuning: no 4-lane vecs
    (("-O3", "-march=sapphirerapids"), "min_4_lanes", "avx512f"),
    (("-O3", "-mavx2", "-mfma"), "min_4_lanes", "avx2"),       # llama.cpp's AVX2 build
])
def test_loop_vectors_probe_tells_the_compilers_tunings_apart(flags: tuple[str, ...], form: str,
                                                              needs: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """GCC 12's vectorizer decides SSM_CONV's taps and vec_dot's leftovers by its tuning: the
    probe must see both forms (facts of the compiler CI installs, Debian's GCC 12).  The probe
    runs what it built, so a tuning for an ISA this CPU lacks is observed on hosts that have it."""
    if needs not in cpu_flags():
        pytest.skip(f"the probe built with {flags[-1]} runs only on a CPU with {needs}")
    monkeypatch.setenv("V8_BUILD_CACHE", str(tmp_path))  # the probe itself runs, not a record
    assert probe_loop_vectors(flags) == form


def test_loop_vectors_probe_reports_a_compiler_failure() -> None:
    with pytest.raises(HostError, match="the probe does not compile"):
        probe_loop_vectors(("-march=no-such-cpu",))


def test_native_loop_vectors_is_a_known_form() -> None:
    assert native_loop_vectors() in LOOP_VECTORS


V4 = ("-O3", "-march=x86-64-v4")
AVX2 = ("-O3", "-mavx2", "-mfma")
# A tuning this CPU can run the probe of, the form GCC 12 gives it, and the other form.
RUNNABLE, FORM, OTHER = (V4, "min_8_lanes", "min_4_lanes") if "avx512f" in cpu_flags() else (
    AVX2, "min_4_lanes", "min_8_lanes")


@pytest.fixture
def wrapped_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CXX is a script of this test's own in front of g++, and the cache is the test's."""
    monkeypatch.setenv("V8_BUILD_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "cxx"
    script.write_text('#!/bin/sh\nexec g++ "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("CXX", str(script))
    return script


def plant(cache: Path, form: str) -> None:
    records = list((cache / "host").glob("loop_vectors-*"))
    assert records
    for record in records:
        record.write_text(form + "\n")


def test_a_probe_result_is_kept_and_a_changed_compiler_probes_again(tmp_path: Path,
                                                                    wrapped_compiler: Path) -> None:
    assert probe_loop_vectors(RUNNABLE) == FORM
    plant(tmp_path / "cache", OTHER)
    assert probe_loop_vectors(RUNNABLE) == OTHER  # the record is what a second run reads
    wrapped_compiler.write_text('#!/bin/sh\n# another compiler\nexec g++ "$@"\n')
    assert probe_loop_vectors(RUNNABLE) == FORM  # the stale record is not used


def test_a_damaged_probe_record_probes_again(tmp_path: Path, wrapped_compiler: Path) -> None:
    assert probe_loop_vectors(RUNNABLE) == FORM
    plant(tmp_path / "cache", "garbage")
    assert probe_loop_vectors(RUNNABLE) == FORM
