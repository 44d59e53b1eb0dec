"""Every script in ``benchmarks/`` still imports against the library and answers ``--help``: a benchmark that a
rename or a moved function broke is found here, not by the next person who runs it on a real model. In process
(the scripts' imports are the test suite's), without loading any model."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys

import pytest
from testkit.eval_runs import BENCHMARKS

SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())
OPTIONAL = {"vllm_agreement": "vllm"}  # scripts that need an extra of their own environment (make test-vllm)


def test_the_scripts_are_found():
    names = {p.stem for p in SCRIPTS}
    assert {"pooled_headline", "lengths_verdict", "positions_per_record", "search_smollm2"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_benchmark_script_imports_and_answers_help(script, monkeypatch):
    if script.stem in OPTIONAL:
        pytest.importorskip(OPTIONAL[script.stem], reason=f"{script.name} needs {OPTIONAL[script.stem]}")
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their siblings, as when run from benchmarks/
    monkeypatch.setattr(sys, "argv", [script.name, "--help"])
    spec = importlib.util.spec_from_file_location(f"_bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stopped:
        spec.loader.exec_module(module)  # a script may parse its arguments as it is imported
        module.main()
    assert stopped.value.code in (0, None), out.getvalue()
    assert out.getvalue().startswith("usage:"), out.getvalue()[:200]
