"""Export and publish end to end: an exported folder loads with `import rope_adapter` alone, and adapters and
exported models pushed with `rope-adapter push` load back from a Hub (our test double) in fresh processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from peft import get_peft_model
from testkit.hub_server import hub_for_test
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter import LrsConfig
from rope_adapter.export import export_model

FACTORS = [1.0, 1.3, 1.7, 2.2]
IDS = torch.randint(3, 250, (1, 48), generator=torch.Generator().manual_seed(3))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from hub_for_test(tmp_path, monkeypatch)


@pytest.fixture
def made(tmp_path: Path) -> dict[str, Path]:
    """A tiny base folder, an adapter with per-layer factors, its export, and the adapter's logits."""
    base_dir = tmp_path / "base"
    tiny_model("llama").save_pretrained(base_dir)
    byte_tokenizer().save_pretrained(base_dir)
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir).eval(), LrsConfig(factors=FACTORS))
    model.save_pretrained(tmp_path / "adapter")
    with torch.inference_mode():
        torch.save(model(IDS).logits, tmp_path / "expected.pt")
    torch.save(IDS, tmp_path / "ids.pt")
    export_model(base_dir, tmp_path / "adapter", tmp_path / "merged", verify=False)
    return {"base": base_dir, "adapter": tmp_path / "adapter", "merged": tmp_path / "merged", "tmp": tmp_path}


def _fresh(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)


def test_export_loads_without_trust_remote_code_after_import_rope_adapter(made):
    out = _fresh(
        f"""
        import sys, torch
        import rope_adapter
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained({str(made["merged"])!r}).eval()
        assert "rope_adapter.export" not in sys.modules
        with torch.inference_mode():
            got = m(torch.load({str(made["tmp"] / "ids.pt")!r})).logits
        assert torch.allclose(got, torch.load({str(made["tmp"] / "expected.pt")!r}), rtol=0, atol=1e-5)
        print("ok", type(m).__name__)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ok LlamaLrsForCausalLM" in out.stdout


def test_an_export_re_saved_after_import_rope_adapter_keeps_its_code_files(made):
    """Loaded through the in-process classes (no trust_remote_code), a model and its config saved again write the
    two ``.py`` files their ``auto_map`` names, so the new folder loads without rope_adapter too."""
    resaved, config_only = made["tmp"] / "resaved", made["tmp"] / "config-only"
    out = _fresh(
        f"""
        import rope_adapter
        from transformers import AutoConfig, AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained({str(made["merged"])!r})
        assert type(m).__module__ == "rope_adapter.standalone", type(m).__module__
        m.save_pretrained({str(resaved)!r})
        AutoConfig.from_pretrained({str(made["merged"])!r}).save_pretrained({str(config_only)!r})
        """
    )
    assert out.returncode == 0, out.stderr
    code = {"configuration_llama_lrs.py", "modeling_llama_lrs.py"}
    for folder in (resaved, config_only):
        assert code <= {p.name for p in folder.iterdir()}, sorted(p.name for p in folder.iterdir())
        for name in code:
            assert (folder / name).read_text() == (made["merged"] / name).read_text()
    out = _fresh(
        f"""
        import sys, torch
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained({str(resaved)!r}, trust_remote_code=True).eval()
        assert "rope_adapter" not in sys.modules
        with torch.inference_mode():
            got = m(torch.load({str(made["tmp"] / "ids.pt")!r})).logits
        assert torch.allclose(got, torch.load({str(made["tmp"] / "expected.pt")!r}), rtol=0, atol=1e-5)
        print("ok")
        """
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_cli_push_then_load_adapter_and_export_from_the_hub_in_fresh_processes(hub, made):
    env = hub.client_env(made["tmp"] / "push_home", token=hub.token)
    for folder, repo in ((made["adapter"], "org/llama-lrs"), (made["merged"], "org/llama-lrs-merged")):
        cli = [sys.executable, "-m", "rope_adapter.cli", "push", str(folder), "--repo", repo]
        done = subprocess.run(cli, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        assert f"pushed {folder} to {repo}: {hub.endpoint}/{repo}/commit/" in done.stdout  # an absolute URL
    assert "README.md" in hub.files("org/llama-lrs") and "README.md" in hub.files("org/llama-lrs-merged")
    for repo in ("org/llama-lrs", "org/llama-lrs-merged"):  # made from a local base: no local path published
        for name, content in hub.files(repo).items():
            if name.endswith((".json", ".md")):
                assert str(made["tmp"]) not in content.decode(), (repo, name)
    assert "\nA local copy of a `llama` model with **Layer-specific RoPE Scaling" in (
        hub.files("org/llama-lrs-merged")["README.md"].decode()
    )

    code = f"""
        import sys, torch
        from transformers import AutoModelForCausalLM
        ids = torch.load({str(made["tmp"] / "ids.pt")!r})
        expected = torch.load({str(made["tmp"] / "expected.pt")!r})
        merged = AutoModelForCausalLM.from_pretrained("org/llama-lrs-merged", trust_remote_code=True).eval()
        assert "rope_adapter" not in sys.modules, "the export must load without rope_adapter"
        with torch.inference_mode():
            assert torch.allclose(merged(ids).logits, expected, rtol=0, atol=1e-5)
        import rope_adapter
        from peft import PeftModel
        base = AutoModelForCausalLM.from_pretrained({str(made["base"])!r}).eval()
        model = PeftModel.from_pretrained(base, "org/llama-lrs")
        with torch.inference_mode():
            assert torch.equal(model(ids).logits, expected)
        print("ok")
        """
    result = hub.run_client(textwrap.dedent(code), hf_home=made["tmp"] / "load_home")
    assert "ok" in result.stdout


def test_cli_push_with_a_bad_token_is_one_line_without_the_token(hub, made):
    bad = "hf_wrong_token_987654321"
    env = hub.client_env(made["tmp"] / "bad_home", token=bad)
    cli = [sys.executable, "-m", "rope_adapter.cli", "push", str(made["adapter"]), "--repo", "org/x"]
    done = subprocess.run(cli, capture_output=True, text=True, env=env)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rope-adapter: error:"), done.stderr
    assert "Traceback" not in done.stderr and bad not in done.stderr + done.stdout
    assert not hub.repo_exists("org/x")


def test_peft_push_to_hub_keeps_working(hub, made):
    """`PeftModel.push_to_hub` of an LRS adapter, then `PeftModel.from_pretrained` from the Hub (fresh process,
    since transformers keeps some Hub settings from import time)."""
    code = f"""
        import torch, rope_adapter
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        base = AutoModelForCausalLM.from_pretrained({str(made["base"])!r}).eval()
        PeftModel.from_pretrained(base, {str(made["adapter"])!r}).push_to_hub("org/pushed-by-peft")
        again = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained({str(made["base"])!r}).eval(), "org/pushed-by-peft"
        )
        assert max(abs(a - b) for a, b in zip(rope_adapter.get_factors(again), {FACTORS!r})) < 1e-6
        with torch.inference_mode():
            got = again(torch.load({str(made["tmp"] / "ids.pt")!r})).logits
        assert torch.equal(got, torch.load({str(made["tmp"] / "expected.pt")!r}))
        print("ok")
        """
    result = hub.run_client(textwrap.dedent(code), hf_home=made["tmp"] / "peft_home", token=hub.token)
    assert "ok" in result.stdout
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(hub.files("org/pushed-by-peft"))
