"""An adapter folder after ``save_pretrained``: one set of weights whatever ``safe_serialization`` says and whatever
an earlier save left, strict JSON in ``adapter_config.json``, and modes as the umask allows."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from testkit.tiny_models import tiny_model

import rope_adapter
from rope_adapter import LrsConfig
from rope_adapter.errors import FolderFormatError, LrsError, NotJsonError

OLD = [1.0, 1.2, 1.4, 1.6]
NEW = [2.0, 2.0, 1.5, 1.5]


def _save(folder: Path, factors: list[float], **kwargs) -> None:
    get_peft_model(tiny_model("llama"), LrsConfig(factors=factors)).save_pretrained(folder, **kwargs)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _loads_with(folder: Path, factors: list[float]) -> None:
    assert rope_adapter.read_adapter_factors(folder)[1].tolist() == pytest.approx(factors)
    model = PeftModel.from_pretrained(tiny_model("llama"), folder)
    assert rope_adapter.get_factors(model) == pytest.approx(factors)


def test_safe_serialization_false_over_a_safetensors_adapter_leaves_a_folder_that_loads(tmp_path):
    """PEFT alone would write adapter_model.bin beside the old adapter_model.safetensors, and every loader would
    read the old weights (ours refused the pair as "edited by hand")."""
    folder = tmp_path / "ad"
    _save(folder, OLD)
    with pytest.warns(UserWarning, match="always saved as adapter_model.safetensors"):
        _save(folder, NEW, safe_serialization=False)
    assert sorted(_bytes(folder)) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    _loads_with(folder, NEW)
    with pytest.warns(UserWarning, match="safe_serialization=False is ignored"):  # PEFT's positional form too
        get_peft_model(tiny_model("llama"), LrsConfig(factors=OLD)).save_pretrained(str(folder), False)
    _loads_with(folder, OLD)


def test_a_pickle_left_by_an_earlier_save_of_an_lrs_adapter_is_removed(tmp_path):
    """What PEFT's torch.save wrote for an LRS adapter before it was always safetensors: removed once the new
    files are in place, so that the folder holds one set of weights."""
    folder = tmp_path / "ad"
    _save(folder, OLD)
    state = {"base_model.model.model.rotary_emb.lrs_factors": torch.tensor(OLD)}
    torch.save(state, folder / "adapter_model.bin")
    _save(folder, NEW)
    assert sorted(_bytes(folder)) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    _loads_with(folder, NEW)


@pytest.mark.parametrize("content", ["lora", "garbage"])
def test_a_pickle_the_project_did_not_write_is_refused_before_any_write(tmp_path, content):
    folder = tmp_path / "ad"
    _save(folder, OLD)
    if content == "lora":
        torch.save({"base_model.model.layers.0.q_proj.lora_A.weight": torch.zeros(2, 2)}, folder / "adapter_model.bin")
    else:
        (folder / "adapter_model.bin").write_bytes(b"not a pickle")
    before = _bytes(folder)
    with pytest.raises(FolderFormatError, match=r"adapter_model\.bin.*did not write"):
        _save(folder, NEW)
    assert _bytes(folder) == before


@pytest.mark.parametrize(
    ("provenance", "field"),
    [
        ({"scores": {"search": {"mean": math.nan}}}, "provenance.scores.search.mean"),
        ({"curve": {"control_points": [[0.0, 1.0], [1.0, math.inf]]}}, r"provenance.curve.control_points\[1\]\[1\]"),
        ({"worst": -math.inf}, "provenance.worst"),
    ],
)
def test_a_non_finite_number_in_provenance_is_refused_naming_the_field(tmp_path, provenance, field):
    """It was written into adapter_config.json as a bare NaN, which is not JSON."""
    with pytest.raises(NotJsonError, match=field):
        LrsConfig(factors=1.1, provenance=provenance)
    folder = tmp_path / "ad"
    _save(folder, OLD)
    before = _bytes(folder)
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=NEW, provenance={"by": "test"}))
    model.peft_config["default"].provenance = provenance  # slipped in after creation
    with pytest.raises(NotJsonError, match=field) as caught:
        model.save_pretrained(folder)
    assert isinstance(caught.value, LrsError)
    assert _bytes(folder) == before


def test_adapter_config_is_strict_json(tmp_path):
    folder = tmp_path / "ad"
    _save(folder, OLD)

    def refuse(value):
        raise ValueError(f"not JSON: {value}")

    json.loads((folder / "adapter_config.json").read_text(), parse_constant=refuse)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077], ids=oct)
def test_every_file_of_a_saved_adapter_has_the_mode_the_umask_allows(tmp_path, set_umask, umask):
    """adapter_model.safetensors was 0600 whatever the umask (a temporary file made by mkstemp, renamed): other
    users of a shared model folder got "Permission denied"."""
    set_umask(umask)
    folder = tmp_path / "ad"
    _save(folder, OLD)
    _save(folder, NEW)  # a save over an existing folder, too
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert modes == dict.fromkeys(["README.md", "adapter_config.json", "adapter_model.safetensors"], 0o666 & ~umask)
