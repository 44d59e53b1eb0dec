"""Real `rope-adapter eval` output on a tiny model, and the benchmark scripts that read it, for tests of those
scripts (`rope-adapter compare`, `benchmarks/eval_agreement.py`)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from rope_adapter.evaluate import EvalSettings, run_eval
from testkit.tiny_models import save_model_folder, tiny_model

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def eval_runner(root: Path, **common) -> Callable[..., Path]:
    """``run(name, variants, **settings)``: one KV-retrieval eval of a tiny Llama saved under ``root``, its
    results.json path returned; ``common`` settings go to every run (a run's own settings win)."""
    model = save_model_folder(tiny_model("llama", num_layers=2), root / "model")
    base = dict(model=str(model), num_pairs=3, num_positions=3, device="cpu", progress=False, plot=False)

    def run(name: str, variants: str, **settings) -> Path:
        merged = {**base, **common, **settings}
        settings = EvalSettings.flat(variants=variants, out=root / name, **merged)
        return run_eval(settings, log=lambda s: None).paths["json"]

    return run
