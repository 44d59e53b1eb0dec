"""The notes `search` and `eval` print on the dtype of a CPU run (rope_adapter.scoring.loading): float32 where AMX
makes bfloat16 faster, bfloat16 where nothing runs it natively."""

from __future__ import annotations

import pytest
import torch

from rope_adapter.cli import main
from rope_adapter.scoring import loading

NO_NATIVE_BF16 = {"amx_bf16": False, "avx512_bf16": False}


@pytest.mark.parametrize("amx", [True, False])
def test_the_float32_note_appears_only_on_a_cpu_with_amx(monkeypatch, amx):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(loading, "cpu_bfloat16_flags", lambda: {"amx_bf16": amx, "avx512_bf16": amx})
    for dtype in ("auto", "float32"):
        assert (loading.bfloat16_hint(dtype, "cpu") is not None) is amx
    assert loading.bfloat16_hint("float16", "cpu") is None
    if amx:
        assert loading.bfloat16_hint("bfloat16", "cpu") is None


@pytest.mark.parametrize(
    ("flags", "amx", "noted"),
    [
        (NO_NATIVE_BF16, False, True),
        ({"amx_bf16": False, "avx512_bf16": True}, False, False),  # AVX512-BF16 runs it natively
        ({"amx_bf16": True, "avx512_bf16": False}, False, False),
        (NO_NATIVE_BF16, True, False),  # torch's own probe finds AMX
        (None, False, False),  # no /proc/cpuinfo: no guess
    ],
)
def test_the_bfloat16_note_appears_only_where_nothing_runs_it_natively(monkeypatch, flags, amx, noted):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(loading, "cpu_bfloat16_flags", lambda: flags)
    for dtype in ("bfloat16", torch.bfloat16):
        hint = loading.bfloat16_hint(dtype, "cpu")
        assert (hint is not None) is noted
        if noted:
            assert "--dtype float32 is likely faster" in hint and "4.7x slower" in hint


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n\nprocessor : 1\nflags : fpu avx2\n")
    assert loading.cpu_bfloat16_flags(info) == {"amx_bf16": False, "avx512_bf16": True}
    assert loading.cpu_bfloat16_flags(tmp_path / "missing") is None


def test_a_failing_probe_gives_no_note(monkeypatch):
    def broken() -> bool:
        raise RuntimeError("no cpuinfo")

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken, raising=False)
    assert loading.bfloat16_hint("float32", "cpu") is None
    monkeypatch.setattr(loading, "cpu_bfloat16_flags", lambda: {"amx_bf16": False, "avx512_bf16": True})
    assert loading.bfloat16_hint("bfloat16", "cpu") is None


def test_eval_prints_the_note_on_stderr_once(monkeypatch, tmp_path, model_dir, capsys):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    args = ["eval", "--model", str(model_dir), "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
    assert main([*args, "--variants", "base", "--out", str(tmp_path / "e"), "--no-progress", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert err.count("--dtype bfloat16 scores about 4x faster") == 1


def test_eval_in_bfloat16_without_native_support_prints_the_note_once(monkeypatch, tmp_path, model_dir, capsys):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(loading, "cpu_bfloat16_flags", lambda: NO_NATIVE_BF16)
    args = ["eval", "--model", str(model_dir), "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
    args += ["--variants", "base", "--out", str(tmp_path / "e"), "--no-progress", "--device", "cpu"]
    assert main([*args, "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().err.count("--dtype float32 is likely faster") == 1
