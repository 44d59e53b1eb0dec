"""Adapter and export folders for card and publishing tests, written by the project's own writers.

``make_adapter`` saves a real LRS adapter (``save_pretrained`` of a tiny random model) and, with ``results``,
the real ``rope-adapter eval`` writer's ``results.json`` and ``results_table.json`` (PositionResults.write)
from chosen per-sample scores, so that the card's numbers are known in advance.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from peft import get_peft_model

from rope_adapter import LrsConfig
from rope_adapter.evaluate.evaluation import PositionResults
from rope_adapter.scoring.variants import Variant
from testkit.tiny_models import tiny_model

FACTORS = [1.0, 1.125, 1.375, 1.5]
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
POSITIONS = [0, 9, 19]
# greedy accuracy per variant, gold position -> correct per record (4 records)
CORRECT = {
    "base": {0: [1, 1, 1, 0], 9: [0, 1, 0, 0], 19: [1, 1, 1, 0]},
    "uniform:1.2": {0: [1, 1, 1, 0], 9: [0, 1, 0, 0], 19: [1, 1, 0, 0]},
    "lrs": {0: [1, 1, 1, 1], 9: [1, 1, 0, 1], 19: [1, 1, 1, 0]},
}
PROVENANCE = {  # the shape search/report.py's provenance() writes
    "method": "bezier-nsga2",
    "curve": {
        "degree": 3,
        "x_mode": "fixed",
        "control_points": [[0.0, 1.0], [1 / 3, 1.1], [2 / 3, 1.45], [1.0, 1.5]],
        "s_min": 0.5,
        "s_max": 2.0,
    },
    "study": {
        "name": "smol-kv20",
        "storage": "sqlite:////home/someone/runs/smol/study.db",
        "trial": 17,
        "sampler": "NSGAIISampler(population_size=8)",
        "seed": 1234,
    },
    "task": {"name": "kv_retrieval", "data": "generated", "pairs": 20, "positions": POSITIONS, "score": "answer"},
    "scores": {"objectives": ["mean", "worst"], "search": {"by_position": {"0": 0.9, "9": 0.4}, "mean": 0.65}},
}


def eval_results(factors: list[float], adapter: str = "lrs") -> PositionResults:
    """What `rope-adapter eval --variants base,uniform:1.2,adapter:...` computes, with the scores of CORRECT."""
    specs = {
        "base": (Variant("base"), None),
        "uniform:1.2": (Variant("uniform:1.2", uniform=1.2), [1.2] * len(factors)),
        "lrs": (Variant("lrs", adapter=adapter), factors),
    }
    variants = [{**v.to_dict(), "factors": f, "seconds": 0.1} for v, f in specs.values()]
    rows = []
    for name, by_position in CORRECT.items():
        for position, correct in by_position.items():
            for record, value in enumerate(correct):
                rows.append(
                    {
                        "variant": name,
                        "sample": len(rows),
                        "record_id": f"r{record}",
                        "position": position,
                        "accuracy": float(value),
                        "logprob": -1.0 + 0.5 * value - 0.01 * record,
                    }
                )
    return PositionResults(
        task="kv_retrieval",
        metrics=["accuracy", "logprob"],
        positions=POSITIONS,
        variants=variants,
        rows=rows,
        reference="base",
        settings={"num_records": 4, "num_samples": 12, "model": SMOLLM2, "task_settings": {"num_pairs": 20}},
    )


def make_adapter(
    folder: Path, factors: list[float] = FACTORS, base: str | None = SMOLLM2, results: bool = True
) -> Path:
    """An LRS adapter saved by the core (with search provenance), plus eval results and a factors plot."""
    model = get_peft_model(tiny_model("llama", num_layers=len(factors)), LrsConfig(factors=factors))
    config = model.peft_config["default"]
    config.base_model_name_or_path = base
    config.provenance = PROVENANCE
    model.save_pretrained(folder, save_embedding_layers=False)  # no Hub lookup of the base model's config
    if results:
        eval_results(factors, adapter=str(folder)).write(folder, plot=False)
        (folder / "factors.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(64))
    return folder


def make_export(
    folder: Path, *, custom_code: bool = True, model_type: str | None = None, factors_in_config: bool = False
) -> Path:
    """An exported model folder laid out like export/bake.py writes it: config.json, lrs_export.json (factors,
    base model, provenance, verification), weights; custom code gets model_type llama_lrs, auto_map and the
    factors in config.json, native gets linear rope_parameters. The card reads no weights."""
    folder.mkdir(parents=True, exist_ok=True)
    base_rope = {"rope_type": "default", "rope_theta": 100.0}
    factors = FACTORS if custom_code else [1.5] * len(FACTORS)
    config = {
        "model_type": model_type or ("llama_lrs" if custom_code else "llama"),
        "architectures": ["LlamaLrsForCausalLM" if custom_code else "LlamaForCausalLM"],
        "num_hidden_layers": len(FACTORS),
        "head_dim": 16,
    }
    if custom_code:
        config.update(
            auto_map={
                "AutoConfig": "configuration_llama_lrs.LlamaLrsConfig",
                "AutoModelForCausalLM": "modeling_llama_lrs.LlamaLrsForCausalLM",
            },
            rope_parameters={"rope_type": "lrs", "base": base_rope},
            lrs_factors=factors,
            lrs_base_model_type="llama",
            lrs_provenance=None,
        )
        (folder / "configuration_llama_lrs.py").write_text("# config code\n")
        (folder / "modeling_llama_lrs.py").write_text("# model code\n")
    else:
        config["rope_parameters"] = {"rope_type": "linear", "rope_theta": 100.0, "factor": 1.5}
        if factors_in_config:  # the layout of an older exporter: factors in config.json even when native
            config.update(lrs_factors=factors, lrs_base_model_type="llama")
    sidecar = {
        "format": "custom-code" if custom_code else "native",
        "base_model": SMOLLM2,
        "base_model_type": "llama",
        "num_layers": len(factors),
        "head_dim": 16,
        "rotary_dim": 16,
        "base_rope_parameters": base_rope,
        "factors": factors,
        "provenance": None,
        "verification": {"max_abs_diff": 0.0, "probe_tokens": 64, "dtype": "torch.float32"},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if not factors_in_config:
        (folder / "lrs_export.json").write_text(json.dumps(sidecar, indent=2))
    (folder / "model.safetensors").write_bytes(b"\x00" * 16)
    return folder


def front_matter(text: str) -> dict:
    import yaml

    assert text.startswith("---\n"), text[:200]
    end = text.index("\n---\n", 4)
    return yaml.safe_load(text[4:end])


def factor_table(text: str) -> dict[int, float]:
    """Rows of the card's '| Layer | Factor |' table."""
    lines = text.splitlines()
    start = lines.index("| Layer | Factor |") + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        layer, factor = (cell.strip() for cell in line.strip("|").split("|"))
        rows[int(layer)] = float(factor)
    return rows
