"""Issue 11: every fault and bad input is refused cleanly, and nothing is changed, lost or half-written."""

from __future__ import annotations

import copy
import datetime
import json
import math
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import save_file
from testkit.adapter_files import edit_adapter_config
from testkit.tiny_models import VOCAB, tiny_model
from transformers import AutoConfig, AutoModelForCausalLM

import rope_adapter
from rope_adapter import AdapterFileError, InvalidFactorsError, LrsConfig, LrsError, count_layer_hooks
from rope_adapter.errors import AdapterNameError

IDS = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))


def snapshot(model: torch.nn.Module) -> dict:
    """Everything a refused adapter must leave as it was."""
    with torch.no_grad():
        logits = model(IDS).logits
    return {
        "modules": [(name, type(m)) for name, m in model.named_modules()],
        "hooks": count_layer_hooks(model),
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "peft_config": "peft_config" in model.__dict__,
        "logits": logits,
    }


def assert_unchanged(model: torch.nn.Module, before: dict) -> None:
    after = snapshot(model)
    assert after["modules"] == before["modules"]
    assert after["hooks"] == before["hooks"] == 0
    assert after["requires_grad"] == before["requires_grad"]
    assert after["peft_config"] is before["peft_config"] is False
    assert torch.equal(after["logits"], before["logits"])


# ------------------------------------------------------------------------------ out-of-range and odd factors


@pytest.mark.parametrize("bad", [1e39, 1e-300, 1e4, 1e-4, True, False, [1.0, True, 1.0, 1.0], "1.2", ["1", 1, 1, 1]])
def test_factors_outside_the_range_or_not_numbers_are_refused(bad):
    base = tiny_model("llama")
    before = snapshot(base)
    with pytest.raises(InvalidFactorsError, match=r"\[0.001, 1000\]|must be (a number|numbers)"):
        get_peft_model(base, LrsConfig(factors=bad))
    assert_unchanged(base, before)


def test_range_limits_are_accepted_and_exact_in_float32():
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=[0.001, 1000.0, 1.0, 2.0]))
    assert rope_adapter.get_factors(model) == pytest.approx([0.001, 1000.0, 1.0, 2.0], rel=1e-7)
    with pytest.raises(InvalidFactorsError, match="must be numbers"):
        rope_adapter.set_factors(model, [1.0, False, 1.0, 1.0])
    with pytest.raises(InvalidFactorsError, match=r"\[0.001, 1000\]"):
        rope_adapter.set_factors(model, 1e39)


def test_two_dimensional_factors_name_the_shape_not_the_layer_count():
    with pytest.raises(InvalidFactorsError, match=r"1-D tensor.*shape \[2, 2\]"):
        rope_adapter.validate_factors(torch.ones(2, 2), 4)
    with pytest.raises(InvalidFactorsError, match="not booleans, strings or lists"):
        rope_adapter.validate_factors([[1.0, 1.0], [1.0, 1.0]], 4)


# ---------------------------------------------------------------------------------------- adapter configs


@pytest.fixture
def adapter_dir(tmp_path: Path) -> Path:
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=[1.0, 1.2, 1.4, 1.6], provenance={"by": "test"}))
    model.save_pretrained(tmp_path / "ad")
    return tmp_path / "ad"


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: (d / "adapter_config.json").write_text(""), "not valid JSON"),
        (lambda d: (d / "adapter_config.json").write_text("[1, 2]"), "must hold a JSON object, found list"),
        (lambda d: (d / "adapter_config.json").write_text('"LRS"'), "must hold a JSON object, found str"),
        (lambda d: edit_adapter_config(d, peft_type=None), "has no peft_type"),
        (lambda d: edit_adapter_config(d, peft_type="lrs"), "upper-case"),
        (lambda d: edit_adapter_config(d, base_rope_parameters=[1, 2]), "base_rope_parameters must be an object"),
        (lambda d: edit_adapter_config(d, base_rope_parameters="default"), "base_rope_parameters must be an object"),
        (lambda d: edit_adapter_config(d, num_layers=5), "num_layers is 5 but it lists 4 factors"),
        (lambda d: edit_adapter_config(d, factors=[1.0, True, 1.4, 1.6]), "must be numbers"),
        (lambda d: edit_adapter_config(d, factors=[1.0, 1e39, 1.4, 1.6]), r"\[0.001, 1000\]"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b""), "adapter_model.safetensors is empty"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b"garbage" * 9), "adapter_model.safetensors is not"),
        (lambda d: (d / "adapter_model.safetensors").unlink(), "no adapter_model.safetensors"),
    ],
)
def test_bad_adapter_folders_get_a_typed_error_naming_the_file(adapter_dir, edit, match):
    edit(adapter_dir)
    with pytest.raises(AdapterFileError, match=match):
        rope_adapter.read_adapter_factors(adapter_dir)


def test_truncated_safetensors_names_the_file(adapter_dir):
    path = adapter_dir / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(AdapterFileError, match="adapter_model.safetensors is not a readable safetensors.*damaged"):
        rope_adapter.read_adapter_factors(adapter_dir)


def test_set_factors_with_an_unknown_name_or_after_unload():
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=1.2))
    with pytest.raises(AdapterNameError, match="no LRS adapter named 'nope'.*'default'"):
        rope_adapter.set_factors(model, 1.1, adapter_name="nope")
    with pytest.raises(AdapterNameError, match="no LRS adapter named"):
        rope_adapter.get_factors(model, adapter_name="nope")
    model.unload()
    with pytest.raises(AdapterNameError, match="holds no LRS adapter any more"):
        rope_adapter.set_factors(model, 1.1)


# ------------------------------------------------------------- a refused adapter leaves the model as it was


def _disagreeing_factors(d: Path) -> None:
    edit_adapter_config(d, factors=[1.0, 1.2, 1.4, 9.0])


def _another_architecture(d: Path) -> None:  # passes the file checks; only the model can tell
    save_file(
        {"base_model.model.gpt_neox.rotary_emb.lrs_factors": torch.tensor([1.0, 1.2, 1.4, 1.6])},
        d / "adapter_model.safetensors",
    )


@pytest.mark.parametrize(
    ("edit", "base_kwargs", "error", "match"),
    [
        (_disagreeing_factors, {}, AdapterFileError, "disagree on the factors"),
        (_another_architecture, {}, AdapterFileError, "made for another architecture"),
        (lambda d: None, {"num_hidden_layers": 6}, rope_adapter.AdapterMismatchError, "4 decoder layers"),
        (lambda d: edit_adapter_config(d, factors=[1.0, 1.2, 1.4, -1.0]), {}, AdapterFileError, "finite and > 0"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b"x"), {}, AdapterFileError, "not a readable"),
        (lambda d: (d / "adapter_model.safetensors").unlink(), {}, AdapterFileError, "no adapter_model.safetensors"),
    ],
)
def test_refused_from_pretrained_leaves_the_base_model_exactly_as_it_was(adapter_dir, edit, base_kwargs, error, match):
    edit(adapter_dir)
    base = tiny_model("llama", **base_kwargs)
    before = snapshot(base)
    with pytest.raises(error, match=match):
        PeftModel.from_pretrained(base, adapter_dir)
    assert_unchanged(base, before)


@pytest.mark.parametrize(
    ("text", "peft_error"),
    [
        ("{not json", ValueError),  # json.JSONDecodeError
        ("", ValueError),
        ("[]", TypeError),
        ('{"peft_type": "lrs"}', KeyError),  # PEFT's types are upper case
        ("{}", KeyError),
    ],
)
def test_config_peft_cannot_parse_fails_in_peft_before_any_change(adapter_dir, text, peft_error):
    (adapter_dir / "adapter_config.json").write_text(text)
    base = tiny_model("llama")
    before = snapshot(base)
    with pytest.raises(peft_error):  # PEFT's own error: PEFT reads the file before any of our code runs
        PeftModel.from_pretrained(base, adapter_dir)
    assert_unchanged(base, before)
    with pytest.raises(AdapterFileError):  # ours names the file and the fix
        rope_adapter.load_lrs_config(adapter_dir)


@pytest.mark.parametrize("edit", [_disagreeing_factors, _another_architecture])
def test_refused_load_adapter_leaves_the_peft_model_as_it_was(adapter_dir, tmp_path, edit):
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=1.1))
    with torch.no_grad():
        before = model(IDS).logits
    bad = tmp_path / "bad"
    model.save_pretrained(bad)
    edit(bad)
    with pytest.raises(AdapterFileError):
        model.load_adapter(bad, adapter_name="bad")
    assert list(model.peft_config) == ["default"]
    assert sorted(model.base_model._wrapper().lrs_factors) == ["default"]
    with pytest.raises(ValueError):
        model.set_adapter("bad")
    assert count_layer_hooks(model) == 4
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, before)


# ------------------------------------------------------------------------- provenance and atomic saving


def test_provenance_that_is_not_json_is_refused_when_the_config_is_made():
    with pytest.raises(LrsError, match=r"provenance\.when is a datetime .*isoformat"):
        LrsConfig(factors=1.1, provenance={"when": datetime.datetime(2025, 1, 1)})
    with pytest.raises(AdapterFileError, match="provenance must be a JSON object"):
        LrsConfig(factors=1.1, provenance=["a"])


def test_a_failed_save_leaves_the_previous_adapter_intact(adapter_dir):
    before = {p.name: p.read_bytes() for p in adapter_dir.iterdir()}
    model = get_peft_model(tiny_model("llama"), LrsConfig(factors=[2.0, 2.0, 2.0, 2.0], provenance={"by": "test"}))
    model.peft_config["default"].provenance["when"] = datetime.datetime(2025, 1, 1)  # slipped in after creation
    with pytest.raises(LrsError, match=r"provenance\.when is a datetime"):
        model.save_pretrained(adapter_dir)
    assert {p.name: p.read_bytes() for p in adapter_dir.iterdir()} == before
    rope_adapter.read_adapter_factors(adapter_dir)  # still a good adapter


def test_config_save_is_atomic_and_leaves_no_temporary(adapter_dir, monkeypatch):
    before = (adapter_dir / "adapter_config.json").read_bytes()
    config = rope_adapter.load_lrs_config(adapter_dir)

    def failing_dumps(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr("peft.config.json.dumps", failing_dumps)
    with pytest.raises(OSError, match="No space left"):
        config.save_pretrained(str(adapter_dir))
    assert (adapter_dir / "adapter_config.json").read_bytes() == before
    assert sorted(p.name for p in adapter_dir.iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]


# -------------------------------------------------------------------------------- exported config.json


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    from rope_adapter.export import export_model

    work = tmp_path_factory.mktemp("exp")
    base = tiny_model("llama")
    get_peft_model(copy.deepcopy(base), LrsConfig(factors=[1.0, 1.2, 1.4, 1.6])).save_pretrained(work / "ad")
    return export_model(base, work / "ad", work / "out", verify=False).path


@pytest.mark.parametrize(
    "bad", [[1.0, math.nan, 1.4, 1.6], [1.0, -1.2, 1.4, 1.6], [1.0, 1e39, 1.4, 1.6], [1.0, True, 1.4, 1.6], "1.2"]
)
@pytest.mark.parametrize("trust_remote_code", [False, True])
def test_exported_config_with_edited_factors_is_refused_by_its_own_class(exported, tmp_path, bad, trust_remote_code):
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(exported, folder)
    config = json.loads((folder / "config.json").read_text())
    config["lrs_factors"] = bad
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="lrs_factors.*numbers in \\[0.001, 1000\\]|non-empty list"):
        AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    with pytest.raises(ValueError, match="lrs_factors"):
        AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=trust_remote_code)


def test_exported_folder_loads_when_untouched(exported):
    config = AutoConfig.from_pretrained(exported)
    assert config.lrs_factors == [1.0, 1.2, 1.4, 1.6] and config.lrs_rotary_layout == "half"
    assert config.vocab_size == VOCAB


def test_exported_code_uses_the_core_factor_range():
    from rope_adapter.factors import FACTOR_MAX, FACTOR_MIN
    from rope_adapter.standalone.config_mixin import LRS_FACTOR_RANGE

    assert LRS_FACTOR_RANGE == (FACTOR_MIN, FACTOR_MAX)
