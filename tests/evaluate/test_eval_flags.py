"""`rope-adapter eval`'s flags are EvalSettings' fields (rope_adapter.cli.settings_flags, as search's are): every
field has a flag with the field's help and default, command lines parse to the settings they always did, and a new
field is a new flag with no other edit."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from rope_adapter.cli import build_parser, main
from rope_adapter.cli.eval import settings_from_args, settings_from_argv
from rope_adapter.cli.settings_flags import add_settings_flags, flag_spec, settings_values
from rope_adapter.evaluate import EvalSettings
from rope_adapter.evaluate.run import _f, checked_task_kwargs
from rope_adapter.scoring.loading import EvalError


def eval_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["eval"]


def test_every_field_is_a_flag_with_its_help_and_default():
    actions = {a.dest: a for a in eval_parser()._actions if a.dest != "help"}
    dests = {}
    for f in fields(EvalSettings):
        flags, kwargs = flag_spec(f)
        dests[kwargs["dest"]] = f.name
        action = actions[kwargs["dest"]]
        assert list(action.option_strings) == list(flags), f.name
        assert f.metadata["help"].replace("%", "%%") == action.help, f.name
    assert set(dests) == set(actions), "a flag that is no EvalSettings field, or a field without a flag"
    assert settings_from_args(eval_parser().parse_args([])) == EvalSettings()


def test_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = capsys.readouterr().out
    for action in eval_parser()._actions:
        for flag in action.option_strings:
            assert flag in text
    for title in ("task and samples:", "scores:", "extrapolation (--task perplexity):"):
        assert title in text
    assert "--num-pairs NUM_PAIRS, --pairs NUM_PAIRS" in text and "--chat-template [{auto,on,off}]" in text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),
        (
            ["--task", "kv-retrieval", "--pairs", "12", "--positions", "0,5", "9", "--num-samples", "3", "--seed", "7"],
            {"task": "kv_retrieval", "num_pairs": 12, "positions": [0, 5, 9], "num_samples": 3, "seed": 7},
        ),
        (
            ["--task-arg", 'target-prefix="x"', "--task-option", "num_records=30", "--chat-template"],
            {"task_args": {"target_prefix": "x", "num_records": 30}, "chat_template": "on"},
        ),
        (
            ["--scores", "accuracy", "--logprob-tokens", "2", "--max-new-tokens", "9", "--batch-size", "2"]
            + ["--max-batch-tokens", "100", "--allow-longer", "--no-plot", "--no-progress", "--system-prompt", "hi"],
            {"scores": "accuracy", "logprob_tokens": 2, "max_new_tokens": 9, "batch_size": 2}
            | {"max_batch_tokens": 100, "allow_longer": True, "plot": False, "progress": False, "system_prompt": "hi"},
        ),
        (
            ["--task", "perplexity", "--data", "book.txt", "--lengths", "1k,2k", "--num-windows", "2", "--stride"]
            + ["64", "--chunk-tokens", "32", "--dtype", "bfloat16", "--device", "cpu", "--adapter", "a", "--out", "o"],
            {"task": "perplexity", "data": "book.txt", "lengths": "1k,2k", "num_windows": 2, "stride": 64}
            | {"chunk_tokens": 32, "dtype": "bfloat16", "device": "cpu", "adapter": "a", "out": Path("o")},
        ),
        (
            ["--task", "passkey", "--num-filler", "10", "--held-out-after", "5", "--num-positions", "3"]
            + ["--variants", "base,uniform:1.1", "--reference", "base", "--model", "m"],
            {"task": "passkey", "num_filler": 10, "held_out_after": 5, "num_positions": 3}
            | {"variants": "base,uniform:1.1", "reference": "base", "model": "m"},
        ),
        (["--task", "mdqa", "--num-documents", "5"], {"task": "mdqa", "num_documents": 5}),
    ],
)
def test_command_lines_give_the_settings(argv, expected):
    settings = settings_from_argv(argv)
    assert settings == EvalSettings(**expected)
    assert isinstance(settings.out, Path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task-arg", "novalue"], "argument --task-arg/--task-option: expected KEY=VALUE, got 'novalue'"),
        (["--positions", "a"], "--positions: expected integers (0 4 9 or 0,4,9), got 'a'"),
        (["--dtype", "x"], "argument --dtype: invalid choice: 'x'"),
        (["--chat-template", "maybe"], "argument --chat-template: invalid choice: 'maybe'"),
        (["--out", ""], "argument --out: the path is empty"),
        (["--num-samples", "x"], "argument --num-samples: expected an integer, got 'x'"),
    ],
)
def test_bad_flags_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit):
        settings_from_argv(argv)
    assert message in capsys.readouterr().err


def test_task_settings_come_from_the_fields():
    s = EvalSettings(data="d.jsonl", positions=[0, 3], num_pairs=4, task_args={"num_records": 9})
    assert s.task_kwargs() == {"data_path": "d.jsonl", "positions": [0, 3], "num_pairs": 4, "num_records": 9}
    with pytest.raises(EvalError, match="task 'passkey' does not take --num-pairs; its settings: "):
        checked_task_kwargs("passkey", {"num_pairs": 3})
    with pytest.raises(EvalError, match="task 'passkey' does not take data_path; "):
        checked_task_kwargs("passkey", {"data_path": "x"})


def test_a_new_field_is_a_new_flag():
    @dataclass
    class MoreSettings(EvalSettings):
        top_k: int | None = _f(None, "a new integer setting", group="scores")
        temperatures: tuple[float, ...] = _f((1.0,), "a new list setting")
        greedy: bool = _f(True, "a new switch, on by default")

    parser = argparse.ArgumentParser()
    add_settings_flags(parser, MoreSettings)
    args = parser.parse_args(["--top-k", "3", "--temperatures", "0.5", "2", "--no-greedy", "--pairs", "4"])
    settings = MoreSettings(**settings_values(MoreSettings, args))
    assert (settings.top_k, settings.temperatures, settings.greedy, settings.num_pairs) == (3, (0.5, 2.0), False, 4)
    assert MoreSettings(**settings_values(MoreSettings, parser.parse_args([]))) == MoreSettings()
    scores = next(g for g in parser._action_groups if g.title == "scores")
    assert "top_k" in {a.dest for a in scores._group_actions}
