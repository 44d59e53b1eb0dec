"""Issue 11, command line and export faults: one line on stderr, exit status 2, before any work, nothing left."""

from __future__ import annotations

import copy
import errno
import json
import os
import signal
import subprocess
import sys

import pytest
from peft import get_peft_model

from rope_adapter import LrsConfig
from rope_adapter.cli import main
from rope_adapter.evaluate import evaluation as ev
from rope_adapter.export import bake, sources, staging

LAYERS = 3


@pytest.fixture(scope="module")
def tiny_llama_layers():
    return LAYERS


@pytest.fixture
def adapter_dir(tmp_path, tiny_llama):
    get_peft_model(copy.deepcopy(tiny_llama), LrsConfig(factors=[1.0, 1.3, 1.8])).save_pretrained(tmp_path / "ad")
    return tmp_path / "ad"


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the input was bad")

    monkeypatch.setattr(ev, "load_model", refuse)
    monkeypatch.setattr(sources.AutoModelForCausalLM, "from_pretrained", refuse)


def one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rope-adapter: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


# ----------------------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--device", "tpu"], ["--device 'tpu'", "use cpu, cuda"]),
        (["--variants", ""], ["--variants is empty"]),
        (["--variants", " , "], ["--variants is empty"]),
        (["--max-batch-tokens", "0"], ["--max-batch-tokens must be >= 1"]),
        (["--max-batch-tokens", "-5"], ["--max-batch-tokens must be >= 1"]),
        (["--logprob-tokens", "0"], ["--logprob-tokens must be >= 1"]),
        (["--max-new-tokens", "0"], ["--max-new-tokens must be >= 1"]),
        (["--num-positions", "0"], ["--num-positions must be >= 1"]),
        (["--variants", "base,uniform:1e39"], ["uniform:1e39", "[0.001, 1000]"]),
        (["--variants", "base,uniform:0.0001"], ["[0.001, 1000]"]),
        (["--out", "FILE/sub"], ["cannot be made", "is a file"]),
        (["--out", "FILE"], ["is a file: give a folder"]),
    ],
)
def test_eval_bad_input_is_one_line_before_the_model_loads(model_dir, tmp_path, capsys, no_model_load, extra, needles):
    (tmp_path / "file").write_text("x")
    extra = [str(tmp_path / x.replace("FILE", "file")) if x.startswith("FILE") else x for x in extra]
    args = ["eval", "--model", str(model_dir), "--num-pairs", "3", "--positions", "0,2", "--num-samples", "1"]
    if "--out" not in extra:
        args += ["--out", str(tmp_path / "o")]
    one_line_error(capsys, main(args + extra), *needles)
    assert not (tmp_path / "o").exists()


def test_a_peft_keyerror_for_lrs_is_the_import_hint_and_other_keyerrors_stay_bugs(
    model_dir, tmp_path, capsys, monkeypatch
):
    """PEFT's ``KeyError: 'LRS'`` (an adapter loaded where ``rope_adapter`` was not imported) becomes the one-line
    hint; any other KeyError is a bug and keeps its traceback."""
    from rope_adapter.errors import MISSING_IMPORT_HINT

    def load(error):
        def raise_(*args, **kwargs):
            raise error

        return raise_

    args = ["eval", "--model", str(model_dir), "--num-pairs", "3", "--positions", "0,2", "--num-samples", "1"]
    args += ["--out", str(tmp_path / "o")]
    monkeypatch.setattr(ev, "load_model", load(KeyError("LRS")))
    err = one_line_error(capsys, main(args))
    assert err == f"rope-adapter: error: {MISSING_IMPORT_HINT}" and "import rope_adapter" in err
    monkeypatch.setattr(ev, "load_model", load(KeyError("hidden_size")))
    with pytest.raises(KeyError, match="hidden_size"):
        main(args)


def test_eval_out_on_a_full_disk_is_refused_before_the_run(model_dir, tmp_path, capsys, no_model_load, monkeypatch):
    monkeypatch.setattr(staging.os, "fsync", enospc)
    rc = main(["eval", "--model", str(model_dir), "--num-pairs", "3", "--out", str(tmp_path / "o")])
    one_line_error(capsys, rc, "is not writable", "No space left")


@pytest.mark.parametrize("command", ["eval", "analyze"])
def test_model_folder_without_a_config_is_one_line(tmp_path, capsys, command):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    rc = main([command, "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o")])
    one_line_error(capsys, rc, "no usable model config", "config.json")


@pytest.mark.parametrize("head_dim", ["7", "0", "-2"])
def test_analyze_odd_head_dim_is_one_line(tmp_path, capsys, head_dim):
    rc = main(["analyze", "--head-dim", head_dim, "--theta", "10000", "--out", str(tmp_path / "o")])
    one_line_error(capsys, rc, "--head-dim must be an even number")


def test_analysis_api_raises_typed_errors():
    from rope_adapter import LrsError
    from rope_adapter.evaluate.analysis import relative_upper_bound

    with pytest.raises(LrsError, match="head_dim must be an even number"):
        relative_upper_bound([1, 2], head_dim=7)


# ----------------------------------------------------------------------------------------------------- info


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: (d / "adapter_config.json").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "adapter_config.json").write_text("[]"), "must hold a JSON object"),
        (lambda d: (d / "adapter_model.safetensors").write_bytes(b""), "adapter_model.safetensors is empty"),
        (lambda d: (d / "adapter_model.safetensors").unlink(), "no adapter_model.safetensors"),
    ],
)
def test_info_on_a_bad_adapter_is_one_line(adapter_dir, capsys, edit, needle):
    edit(adapter_dir)
    one_line_error(capsys, main(["info", str(adapter_dir)]), needle)


# --------------------------------------------------------------------------------------------------- export


def _export_args(model_dir, adapter, out, *extra):
    return ["export", "--model", str(model_dir), "--adapter", str(adapter), "--out", str(out), *extra]


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--max-shard-size", "banana"], ["--max-shard-size 'banana' is not a size"]),
        (["--max-shard-size", "0"], ["--max-shard-size must be > 0"]),
        (["--atol", "-1"], ["--atol must be a number >= 0"]),
        (["--atol", "nan"], ["--atol must be a number >= 0"]),
    ],
)
def test_export_bad_options_are_one_line_before_any_work(
    model_dir, adapter_dir, tmp_path, capsys, no_model_load, extra, needles
):
    one_line_error(capsys, main(_export_args(model_dir, adapter_dir, tmp_path / "out", *extra)), *needles)
    assert not (tmp_path / "out").exists()


def test_export_of_a_truncated_adapter_is_refused_before_the_weights_load(
    model_dir, adapter_dir, tmp_path, capsys, no_model_load
):
    path = adapter_dir / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:-4])
    rc = main(_export_args(model_dir, adapter_dir, tmp_path / "out"))
    one_line_error(capsys, rc, "adapter_model.safetensors is not a readable safetensors file")


def test_export_to_an_unwritable_place_is_one_line(model_dir, adapter_dir, tmp_path, capsys, no_model_load):
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, main(_export_args(model_dir, adapter_dir, tmp_path / "file" / "out")), "is a file")


def test_disk_full_during_export_leaves_nothing(tiny_llama, adapter_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(bake, "write_code", enospc)
    with pytest.raises(staging.ExportError, match="No space left.*nothing was written"):
        bake.export_model(tiny_llama, adapter_dir, tmp_path / "out", verify=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]


def test_sigterm_during_export_is_handled_like_ctrl_c(tiny_llama, adapter_dir, tmp_path, monkeypatch):
    def terminated_while_verifying(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM should have interrupted the export")

    monkeypatch.setattr(bake, "verify_export", terminated_while_verifying)
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        bake.export_model(tiny_llama, adapter_dir, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]
    assert signal.getsignal(signal.SIGTERM) == previous


def test_sigterm_during_cli_export_exits_130_and_leaves_nothing(model_dir, adapter_dir, tmp_path, capsys, monkeypatch):
    def terminated_while_verifying(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM should have interrupted the export")

    monkeypatch.setattr(bake, "verify_export", terminated_while_verifying)
    assert main(_export_args(model_dir, adapter_dir, tmp_path / "out")) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ad"]


def test_next_export_removes_the_temporaries_of_a_killed_one(tiny_llama, adapter_dir, tmp_path):
    out = tmp_path / "out"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    stale = staging.make_temporary(out)
    (stale / "model.safetensors").write_bytes(b"\0" * 1000)
    owner = json.loads((stale / staging.OWNER_FILE).read_text())
    (stale / staging.OWNER_FILE).write_text(json.dumps({**owner, "pid": dead_pid}))
    alive = staging.make_temporary(out)  # this process: still running, kept
    foreign = tmp_path / f".{out.name}.tmp-notours"  # no owner mark: not ours, kept
    foreign.mkdir()
    bake.export_model(tiny_llama, adapter_dir, out, verify=False)
    assert not stale.exists() and alive.exists() and foreign.exists()
    assert staging.OWNER_FILE not in {p.name for p in out.iterdir()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_verification_child_dies_with_the_export():
    """The fresh-process check is started with PR_SET_PDEATHSIG: SIGKILL of the export leaves no orphan. This
    process becomes a child subreaper, so the orphan is reparented here and waitpid tells how it ended."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    code = (
        "import subprocess, sys, time\n"
        "from rope_adapter.export.staging import die_with_parent\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], preexec_fn=die_with_parent)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    assert libc.prctl(36, 1) == 0  # PR_SET_CHILD_SUBREAPER
    try:
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        _, status = os.waitpid(child, 0)
    finally:
        libc.prctl(36, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_eval_api_names_a_bad_device_and_a_config_without_model_type(tmp_path):
    with pytest.raises(ev.EvalError, match="unknown device 'tpu'; use cpu, cuda"):
        ev.resolve_device("tpu")
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')  # no model_type: transformers raises ValueError
    with pytest.raises(ev.EvalError, match="cannot read the model config"):
        ev.load_model_config(str(tmp_path))


@pytest.mark.parametrize("spec", ["uniform:1e39", "uniform:1e-300", "linear:5000", "dynamic:nan"])
def test_variant_factors_outside_the_core_range_are_refused_by_the_api(spec):
    from rope_adapter.scoring.variants import VariantError, parse_variant

    with pytest.raises(VariantError, match=r"in \[0.001, 1000\]"):
        parse_variant(spec)


@pytest.mark.parametrize("repo", ["", "   ", "a/b/c", "org/", "/name"])
def test_push_names_a_bad_repo_id_before_the_token_or_the_network(adapter_dir, repo, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["push", str(adapter_dir), "--repo", repo]) == 2
    err = capsys.readouterr().err
    assert "is not a Hub repo name" in err and "token" not in err


def _read_only(*args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_read_only_out_is_one_line_before_any_work(
    model_dir, adapter_dir, tmp_path, capsys, no_model_load, monkeypatch, command
):
    """Tests run as root, where chmod does not stop a write: the file system's refusal is simulated where the
    writability probe meets it (rope_adapter.writable)."""
    import rope_adapter.writable as writable

    monkeypatch.setattr(writable.tempfile, "TemporaryFile", _read_only)
    out = tmp_path / "out"
    if command == "eval":
        rc = main(["eval", "--model", str(model_dir), "--num-pairs", "3", "--out", str(out)])
    else:
        rc = main(_export_args(model_dir, adapter_dir, out))
    one_line_error(capsys, rc, "is not writable", "Read-only file system", "choose another folder")
    assert not out.exists()
