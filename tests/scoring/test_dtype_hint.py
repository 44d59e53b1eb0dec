"""The note `search` and `eval` print for a float32 run on a CPU with AMX (rope_adapter.scoring.loading)."""

from __future__ import annotations

import pytest
import torch

from rope_adapter.cli import main
from rope_adapter.scoring import loading


@pytest.mark.parametrize("amx", [True, False])
def test_the_note_appears_only_for_float32_on_a_cpu_with_amx(monkeypatch, amx):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    for dtype in ("auto", "float32"):
        assert (loading.bfloat16_hint(dtype, "cpu") is not None) is amx
    assert loading.bfloat16_hint("bfloat16", "cpu") is None
    assert loading.bfloat16_hint("float16", "cpu") is None


def test_a_failing_probe_gives_no_note(monkeypatch):
    def broken() -> bool:
        raise RuntimeError("no cpuinfo")

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken, raising=False)
    assert loading.bfloat16_hint("float32", "cpu") is None


def test_eval_prints_the_note_on_stderr_once(monkeypatch, tmp_path, model_dir, capsys):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    args = ["eval", "--model", str(model_dir), "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
    assert main([*args, "--variants", "base", "--out", str(tmp_path / "e"), "--no-progress", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert err.count("--dtype bfloat16 scores about 4x faster") == 1
