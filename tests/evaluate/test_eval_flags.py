"""`rope-adapter eval`'s flags are EvalSettings' settings, its parts' included, by flat name
(rope_adapter.cli.settings_flags, as search's are): every setting has a flag with its help and the command's
default, command lines parse to the settings they always did, and a new field is a new flag with no other edit."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from rope_adapter.cli import build_parser, main
from rope_adapter.cli.eval import OVERRIDES, settings_from_args, settings_from_argv
from rope_adapter.cli.settings_flags import (
    add_settings_flags,
    command_defaults,
    flag_spec,
    settings_fields,
    settings_values,
)
from rope_adapter.composed import setting
from rope_adapter.evaluate import EvalSettings
from rope_adapter.scoring.loading import EvalError
from rope_adapter.scoring.settings_parts import ModelSettings, TaskSettings


def eval_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["eval"]


def test_every_field_is_a_flag_with_its_help_and_default():
    actions = {a.dest: a for a in eval_parser()._actions if a.dest != "help"}
    dests = {}
    defaults = command_defaults(EvalSettings)
    for name, entry in settings_fields(EvalSettings).items():
        flags, kwargs = flag_spec(entry, defaults[name], OVERRIDES.get(name))
        dests[kwargs["dest"]] = name
        action = actions[kwargs["dest"]]
        assert list(action.option_strings) == list(flags), name
        assert entry.field.metadata["help"].replace("%", "%%") == action.help, name
        if kwargs.get("action") not in ("append", "store_true", "store_false"):  # a switch's default is its off
            assert action.default == defaults[name], name
    assert set(dests) == set(actions), "a flag that is no EvalSettings setting, or a setting without a flag"
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
    assert "--pairs N, --num-pairs N" in text and "--chat-template [{auto,on,off}]" in text
    assert "--data-seed DATA_SEED, --seed DATA_SEED" in text and "--task-option KEY=VALUE, --task-arg" in text


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
    assert settings == EvalSettings.flat(**expected)
    assert isinstance(settings.out, Path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task-arg", "novalue"], "argument --task-option/--task-arg: expected KEY=VALUE, got 'novalue'"),
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


def test_task_settings_come_from_the_task_part():
    s = EvalSettings.flat(data="d.jsonl", positions=[0, 3], num_pairs=4, task_args={"num_records": 9})
    assert s.task == TaskSettings(data="d.jsonl", positions=(0, 3), pairs=4, options={"num_records": 9})
    assert s.task_kwargs() == {"data_path": "d.jsonl", "positions": (0, 3), "num_pairs": 4, "num_records": 9}
    with pytest.raises(EvalError, match="task 'passkey' does not take --pairs; its settings: "):
        EvalSettings.flat(task="passkey", pairs=3).task_kwargs()
    with pytest.raises(EvalError, match="task 'passkey' does not take --data; "):
        EvalSettings.flat(task="passkey", data="x").task_kwargs()


def test_the_parts_are_search_s_and_the_old_names_are_read_once():
    """EvalSettings holds the model and task parts SearchSettings holds, with the same field names; eval's older
    keywords (num_pairs, seed, task_args) and the task's other spelling are read as the one name."""
    from rope_adapter.search import SearchSettings

    task = TaskSettings(name="kv-retrieval", pairs=12, seed=7, options={"target_prefix": "x"})
    assert task.name == "kv_retrieval"
    composed = EvalSettings(model=ModelSettings(name="m", dtype="float32"), task=task)
    assert composed == EvalSettings.flat(model="m", task="kv_retrieval", num_pairs=12, seed=7, task_args=task.options)
    # the same part serves both; search fills what is left to the command (20 pairs: given here), the part unchanged
    assert SearchSettings(task=task).task == task
    assert SearchSettings(task=dataclasses.replace(task, pairs=None)).task == dataclasses.replace(task, pairs=20)
    assert task.num_positions is None
    with pytest.raises(TypeError, match="'num_pairs' is 'pairs', given twice"):
        EvalSettings.flat(pairs=3, num_pairs=3)
    with pytest.raises(EvalError, match="eval scores one record length"):
        EvalSettings.flat(pairs=(3, 4))


def test_a_new_field_is_a_new_flag():
    @dataclass
    class MoreSettings(EvalSettings):
        top_k: int | None = setting(None, "a new integer setting", group="scores")
        temperatures: tuple[float, ...] = setting((1.0,), "a new list setting")
        greedy: bool = setting(True, "a new switch, on by default")

    parser = argparse.ArgumentParser()
    add_settings_flags(parser, MoreSettings)
    args = parser.parse_args(["--top-k", "3", "--temperatures", "0.5", "2", "--no-greedy", "--pairs", "4"])
    settings = MoreSettings.flat(**settings_values(MoreSettings, args))
    assert (settings.top_k, settings.temperatures, settings.greedy, settings.task.pairs) == (3, (0.5, 2.0), False, 4)
    assert MoreSettings.flat(**settings_values(MoreSettings, parser.parse_args([]))) == MoreSettings()
    scores = next(g for g in parser._action_groups if g.title == "scores")
    assert "top_k" in {a.dest for a in scores._group_actions}
