"""lm-evaluation-harness on an LRS adapter (rope_adapter.harness) and on an exported folder (plain lm_eval).

One tiny random Llama (vocabulary = the byte tokenizer's length, so lm_eval's ``peft=`` route does not resize its
embeddings), one adapter with a clear factor curve, a local loglikelihood task over four KV-retrieval-like JSONL
records. Every route's per-sample log-likelihoods must equal those computed here with the adapted model (and
differ from the base model's): the factors were really active inside the harness. Two subprocesses only (the
command line, and plain lm_eval on the exported folder), since the suite shares two cores.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from testkit.tiny_models import byte_tokenizer, tiny_model
from transformers import AutoModelForCausalLM

from rope_adapter import LrsConfig, LrsError, get_factors, harness

needs_lm_eval = pytest.mark.skipif(find_spec("lm_eval") is None, reason='needs pip install "rope-adapter[harness]"')

FACTORS = [1.0, 1.5, 2.5, 4.0]  # per-layer: the export needs custom code (trust_remote_code)
TASK = "lrs_kv_tiny"
ATOL = 1e-4
MIN_EFFECT = 0.02  # every score must differ from the base model's by this much (200 x ATOL)


def kv_records(n: int = 4, pairs: int = 6, seed: int = 0) -> list[dict[str, str]]:
    """KV-retrieval-like prompts: ``k0=59; k1=63; ... k3=`` and the value to retrieve."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        values = [str(rng.randint(10, 99)) for _ in range(pairs)]
        key = rng.randrange(pairs)
        context = " ".join(f"k{i}={v};" for i, v in enumerate(values)) + f" k{key}="
        records.append({"context": context, "answer": values[key]})
    return records


def task_yaml(data: Path, cache: Path) -> str:
    """A local lm_eval task: loglikelihood of ``answer`` right after ``context`` (no delimiter in between)."""
    return "\n".join(
        [
            f"task: {TASK}",
            "dataset_path: json",
            "dataset_kwargs:",
            f"  data_files: {{test: {json.dumps(str(data))}}}",
            f"  cache_dir: {json.dumps(str(cache))}",
            "test_split: test",
            "output_type: loglikelihood",
            'doc_to_text: "{{context}}"',
            'doc_to_target: "{{answer}}"',
            'target_delimiter: ""',
            "metric_list:",
            "  - metric: acc",
            "",
        ]
    )


def loglikelihood(model, tokenizer, context: str, continuation: str) -> float:
    """log p(continuation | context), computed as lm_eval's HFLM does for a causal LM (one unpadded row)."""
    ids = tokenizer.encode(context + continuation)
    n_context = len(tokenizer.encode(context))
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[i - 1, ids[i]] for i in range(n_context, len(ids))))


@dataclass(frozen=True)
class HarnessSetup:
    """One test folder's inputs and the per-record log-likelihoods every route must reproduce."""

    root: Path
    base: Path
    adapter: Path
    exported: Path
    tasks: Path
    records: list[dict[str, str]]
    adapted: list[float]  # with the adapter's factors
    base_ll: list[float]  # with the adapter disabled


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> HarnessSetup:
    """Base folder, adapter, exported folder, task folder, and the expected per-record log-likelihoods."""
    from rope_adapter.export import export_model

    root = tmp_path_factory.mktemp("harness")
    tokenizer = byte_tokenizer()
    base = root / "base"
    model = tiny_model("llama", vocab_size=len(tokenizer))
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # sharper logits: the factors move each score by 0.05 or more, not 0.005
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    adapter = root / "adapter"
    get_peft_model(tiny_model("llama", vocab_size=len(tokenizer)), LrsConfig(factors=FACTORS)).save_pretrained(adapter)
    exported = export_model(base, adapter, root / "exported", verify=False).path

    records = kv_records()
    data = root / "kv.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / f"{TASK}.yaml").write_text(task_yaml(data, root / "datasets-cache"))

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
    adapted = [loglikelihood(model, tokenizer, r["context"], r["answer"]) for r in records]
    with model.disable_adapter():
        plain = [loglikelihood(model, tokenizer, r["context"], r["answer"]) for r in records]
    return HarnessSetup(root, base, adapter, exported, tasks, records, adapted=adapted, base_ll=plain)


def harness_env(root: Path) -> dict[str, str]:
    """Offline, and every cache (Hugging Face, datasets, lm_eval's request cache) inside the test's folder; the
    task's ``cache_dir`` also holds the datasets cache there when ``datasets`` was imported before this test."""
    return dict(
        HF_HOME=str(root / "hf-home"),
        HF_DATASETS_CACHE=str(root / "hf-datasets"),
        LM_HARNESS_CACHE_PATH=str(root / "lm-eval-cache"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )


def lm_eval_args(setup: HarnessSetup, model_args: str, out: Path) -> list[str]:
    return [
        *("--model", "hf", "--model_args", model_args, "--device", "cpu", "--batch_size", "1"),
        *("--tasks", TASK, "--include_path", str(setup.tasks), "--log_samples", "--output_path", str(out)),
    ]


def run_in_subprocess(code: str, args: list[str], cwd: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**os.environ, **harness_env(cwd)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def scores_from_samples(samples: list[dict], records: list[dict]) -> list[float]:
    """Per-record log-likelihoods from lm_eval's logged samples, after checking each request's (context, target)."""
    by_doc = {int(s["doc_id"]): s for s in samples}
    assert sorted(by_doc) == list(range(len(records)))
    scores = []
    for i, record in enumerate(records):
        sample = by_doc[i]
        request = sample["arguments"]  # in the samples file {"gen_args_0": {"arg_0": ..., "arg_1": ...}}
        request = tuple(request["gen_args_0"].values()) if isinstance(request, dict) else tuple(request[0])
        assert request == (record["context"], record["answer"])
        scores.append(float(sample["filtered_resps"][0][0]))
    return scores


def scores_from_output(out: Path, records: list[dict]) -> list[float]:
    files = sorted(out.rglob(f"samples_{TASK}_*.jsonl"))
    assert len(files) == 1, files
    return scores_from_samples([json.loads(line) for line in files[0].read_text().splitlines()], records)


def check_scores(got: list[float], setup: HarnessSetup) -> None:
    assert got == pytest.approx(setup.adapted, abs=ATOL)
    assert all(abs(g - b) > MIN_EFFECT for g, b in zip(got, setup.base_ll, strict=True)), (got, setup.base_ll)


def check_lm_eval_in_subprocess(setup: HarnessSetup, code: str, model_args: str, out_name: str) -> None:
    """Run ``code`` with lm_eval's flags for the task in a fresh process; its logged scores must be the adapted
    model's."""
    out = setup.root / out_name
    run_in_subprocess(code, lm_eval_args(setup, model_args, out), cwd=setup.root)
    check_scores(scores_from_output(out, setup.records), setup)


# ------------------------------------------------------------------------------------------------ tests


def test_factors_change_the_task_scores(setup):
    """The check below would be empty if the factors did not move these log-likelihoods."""
    assert all(abs(a - b) > MIN_EFFECT for a, b in zip(setup.adapted, setup.base_ll, strict=True))


@needs_lm_eval
def test_command_line_evaluates_an_adapter(setup):
    """``rope_adapter.harness.main([...])``: lm_eval's own flags, ``peft=ADAPTER`` in a fresh process (which also
    checks that the core package never imports lm_eval)."""
    code = (
        "import sys, rope_adapter, rope_adapter.cli, rope_adapter.export\n"
        "assert 'lm_eval' not in sys.modules, 'the core package imported lm_eval'\n"
        "from rope_adapter.harness import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    check_lm_eval_in_subprocess(setup, code, f"pretrained={setup.base},peft={setup.adapter}", "out-cli")


@needs_lm_eval
def test_exported_folder_with_plain_lm_eval(setup):
    """Plain ``lm_eval`` (rope_adapter blocked from importing) loads the export with trust_remote_code=True."""
    code = (
        "import runpy, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'rope_adapter':\n"
        "            raise ImportError('blocked: plain lm_eval must not need rope_adapter')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['lm_eval', *sys.argv[1:]]\n"
        "runpy.run_module('lm_eval', run_name='__main__', alter_sys=True)\n"
    )
    check_lm_eval_in_subprocess(setup, code, f"pretrained={setup.exported},trust_remote_code=True", "out-export")


@needs_lm_eval
def test_hflm_in_process(setup, monkeypatch):
    """``lm_eval.simple_evaluate(model=hflm(base, adapter), ...)`` in this process."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(setup.root)
    for name, value in harness_env(setup.root).items():
        monkeypatch.setenv(name, value)
    lm = harness.hflm(setup.base, setup.adapter, device="cpu", batch_size=1)
    assert get_factors(lm.model) == pytest.approx(FACTORS)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[TASK],
        task_manager=TaskManager(include_path=str(setup.tasks), include_defaults=False),
        log_samples=True,
    )
    check_scores(scores_from_samples(results["samples"][TASK], setup.records), setup)


@needs_lm_eval
def test_main_passes_lm_eval_exit_status_and_restores_argv(capsys):
    argv = list(sys.argv)
    assert harness.main(["run", "--no-such-flag"]) == 2
    assert sys.argv == argv
    assert "--no-such-flag" in capsys.readouterr().err


def test_console_script_is_declared():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("rope-adapter-lm-eval") == "rope_adapter.harness:main"


def test_clear_error_without_lm_eval(setup, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` now raises ImportError
    with pytest.raises(harness.HarnessMissingError, match=r'pip install "rope-adapter\[harness\]"') as info:
        harness.hflm(setup.base, setup.adapter)
    assert isinstance(info.value, LrsError) and isinstance(info.value, ImportError)
    assert harness.main(["--tasks", TASK]) == 2
    assert 'pip install "rope-adapter[harness]"' in capsys.readouterr().err
