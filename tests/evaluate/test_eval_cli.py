"""`rope-adapter eval` from the command line: positions and perplexity runs, bad input refused before the model loads,
the flags it spells like `search`, and a short run on the real SmolLM2."""

from __future__ import annotations

import importlib
import json

import pytest
from peft import get_peft_model
from testkit.eval_fixtures import LAYERS
from testkit.tiny_models import tiny_model

from rope_adapter import LrsConfig
from rope_adapter.cli import main
from rope_adapter.evaluate import evaluation as ev
from rope_adapter.scoring.variants import check_variants, parse_variants


@pytest.fixture(scope="module")
def tiny_llama_layers():
    return LAYERS


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_eval_positions(model_dir, adapter_dir, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "eval",
            "--model",
            str(model_dir),
            "--num-pairs",
            "3",
            "--num-positions",
            "3",
            "--num-samples",
            "2",
            "--variants",
            f"base,uniform:1,adapter:{adapter_dir},linear:2+adapter:{adapter_dir}",
            "--out",
            str(out),
            "--no-progress",
            "--device",
            "cpu",
        ]
    )
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert [v["name"] for v in data["variants"]] == [
        "base",
        "uniform:1",
        f"adapter:{adapter_dir.name}",
        f"linear:2+adapter:{adapter_dir.name}",
    ]
    assert data["variants"][3]["rope_parameters"]["rope_type"] == "linear"
    assert data["variants"][3]["factors"] == pytest.approx([1.0, 1.3, 1.8])
    assert data["comparisons"]["uniform:1"]["logprob"]["overall"]["verdict"] == "identical"
    assert data["settings"]["command"].startswith("rope-adapter eval --task kv_retrieval")
    assert (out / "positions.png").stat().st_size > 0 and "## Differences from `base`" in (
        out / "results.md"
    ).read_text()
    assert "wrote" in capsys.readouterr().out


def test_cli_eval_perplexity(model_dir, text_file, tmp_path):
    out = tmp_path / "ppl"
    rc = main(
        ["eval", "--model", str(model_dir), "--task", "perplexity", "--data", str(text_file), "--lengths", "256,1k"]
        + ["--num-windows", "1", "--chunk-tokens", "128", "--out", str(out), "--no-progress", "--device", "cpu"]
    )
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert [v["name"] for v in data["variants"]] == ["base", "linear:2", "dynamic:2"]  # the default set
    assert (out / "lengths.png").is_file() and "perplexity" in (out / "results.md").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--variants", "base,lora:2"], "unknown variant"),
        (["--variants", "base,uniform:-1"], "must be finite, in"),
        (["--num-pairs", "4", "--positions", "0,9"], "outside 0..3"),
        (
            ["--num-pairs", "12"],
            "prompts are longer (1128 tokens at most) than the model's 512 positions",
        ),  # prompts beyond the tiny model's 512 positions
        (["--num-samples", "0"], "--num-samples must be >= 1"),
        (["--task", "mdqa", "--data", "EMPTY"], "holds no records"),
        (["--task", "perplexity", "--data", "EMPTY"], "is empty"),
        (["--task", "perplexity"], "needs --data"),
        (["--task", "perplexity", "--data", "TEXT", "--lengths", "64k"], "too few for one window"),
        (["--task", "passkey", "--num-pairs", "3"], "does not take --pairs"),
        (["--num-pairs", "3", "--variants", "base", "--reference", "other"], "--reference 'other'"),
        (["--task", "nope"], "unknown task"),
        (["--scores", "bleu"], "unknown --scores"),
        (["--data", "MISSING"], "does not exist"),
    ],
)
def test_cli_bad_input_fails_before_loading_the_model(
    model_dir, text_file, tmp_path, capsys, no_model_load, extra, message
):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    replace = {"EMPTY": str(empty), "TEXT": str(text_file), "MISSING": str(tmp_path / "missing.jsonl")}
    extra = [replace.get(x, x) for x in extra]
    rc = main(["eval", "--model", str(model_dir), "--out", str(tmp_path / "o")] + extra)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_cli_adapter_for_another_base_fails_before_loading(model_dir, tmp_path, capsys, no_model_load):
    other = tmp_path / "other"
    get_peft_model(tiny_model("llama", num_layers=LAYERS + 1), LrsConfig(factors=1.2)).save_pretrained(other)
    rc = main(["eval", "--model", str(model_dir), "--variants", f"base,adapter:{other}", "--num-pairs", "3"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "was made for a model with 4 decoder layers, this llama model has 3" in err


# ---------------------------------------------------------------------------------------------------- real model


@pytest.mark.integration
def test_eval_on_smollm2(smollm2, tmp_path):
    model, tokenizer = smollm2
    task, samples = ev.make_task_samples("kv_retrieval", num_samples=2, num_pairs=6, positions=[0, 5])
    variants = parse_variants("base,uniform:1,uniform:1.25")
    result = ev.evaluate_positions(
        model,
        tokenizer,
        task,
        samples,
        variants,
        plans=check_variants(variants, model.config),
        max_new_tokens=12,  # short answers keep the test quick on 2 CPU cores; identity is checked on their text
        progress=False,
        settings={"model": "SmolLM2-135M-Instruct"},
    )
    result.write(tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["comparisons"]["uniform:1"]["accuracy"]["overall"]["verdict"] == "identical"
    assert data["comparisons"]["uniform:1"]["logprob"]["overall"]["verdict"] == "identical"
    assert data["comparisons"]["uniform:1.25"]["logprob"]["overall"]["verdict"] != "identical"
    assert data["summary"]["base"]["logprob"]["overall"]["mean"] > -2.0  # the real model copies a uuid from context
    assert len(data["samples"]) == 3 * 4 and all(r["prediction"] for r in data["samples"])
    assert data["settings"]["max_new_tokens"] == 12
    answers = {(r["variant"], r["sample"]): r["prediction"] for r in data["samples"]}
    assert all(answers[("uniform:1", i)] == answers[("base", i)] for i in range(4))
    assert (tmp_path / "positions.png").is_file()


def test_eval_and_search_spell_shared_flags_alike():
    """`eval` and `search` take the same spellings: --pairs/--num-pairs, --positions 0 4 9 or 0,4,9,
    --task-option/--task-arg, and a bare --chat-template."""
    from rope_adapter.cli import build_parser

    parser = build_parser()
    for argv in (["--pairs", "7", "--positions", "0", "4,9"], ["--num-pairs", "7", "--positions", "0,4,9"]):
        ev_args = parser.parse_args(["eval", *argv, "--task-option", "a=1", "--chat-template"])
        se_args = parser.parse_args(["search", *argv, "--task-arg", "a=1", "--chat-template"])
        assert ev_args.pairs == 7
        assert se_args.pairs == [7]  # search takes several record lengths (--pairs 25 50 75): one is a list of one
        assert ev_args.positions == se_args.positions == [0, 4, 9]
        assert ev_args.task_options == se_args.task_options == [("a", 1)]
        assert ev_args.chat_template == se_args.chat_template == "on"
    for name in ("eval", "search", "analyze"):  # the task's other spelling is read once, into the task part
        command = importlib.import_module(f"rope_adapter.cli.{name}")
        args = parser.parse_args([name, "--task", "kv-retrieval"])
        assert command.settings_from_args(args).task.name == "kv_retrieval"
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--positions", "0,x"])


@pytest.mark.parametrize("text, value", [("1.25", 1.25), ("3/2", 1.5), ("1_000", 1000.0), ("125e-2", 1.25)])
def test_variant_factors_parse_as_every_numeric_flag_does(text, value):
    """`uniform:F` takes a number in the notations every numeric flag takes (rope_adapter.numbers.parse_number)."""
    assert parse_variants(f"uniform:{text}")[0].uniform == value
