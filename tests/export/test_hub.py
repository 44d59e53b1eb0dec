"""Publishing through the Hub protocol: the unmodified huggingface_hub client against tests/testkit/hub_server.py.

The `hub` fixture (hub_for_test in tests/testkit/hub_server.py) starts a HubTestServer and points this process's client at it
(HF_ENDPOINT, fresh HF_HOME, HF_HUB_OFFLINE=0, HF_HUB_DISABLE_XET=1 so uploads take the LFS path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from testkit.card_folders import FACTORS, SMOLLM2, factor_table, front_matter, make_adapter
from testkit.hub_handler import HubHandler
from testkit.hub_server import HubTestServer, hub_for_test

from rope_adapter.export.hub import HubPublishError, absolute_url, push_folder

TOKEN = HubTestServer.DEFAULT_TOKEN
WRONG_TOKEN = "hf_wrong_secret_token_value_42"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from hub_for_test(tmp_path, monkeypatch)


# folders --------------------------------------------------------------------------------------------------


def snapshot_of(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# the protocol, with the plain client ------------------------------------------------------------------------


def test_upload_big_file_through_lfs_and_download_identical_bytes(hub, tmp_path):
    folder = tmp_path / "upload"
    (folder / "sub").mkdir(parents=True)
    big = os.urandom(11 * 1024 * 1024)  # > 10 MB: must go through LFS whatever its name
    (folder / "weights.dat").write_bytes(big)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "sub" / "notes.txt").write_text("small file in a subfolder\n")

    api = HfApi(token=TOKEN)
    url = api.create_repo("org/roundtrip")
    assert url.repo_id == "org/roundtrip" and url.startswith(hub.endpoint)
    commit = api.upload_folder(folder_path=folder, repo_id="org/roundtrip", commit_message="add files")
    assert commit.oid in commit.commit_url

    assert hub.lfs_paths("org/roundtrip") == {"weights.dat"}
    calls = {(method, path) for method, path, status in hub.requests if status == 200}
    assert ("POST", "/org/roundtrip.git/info/lfs/objects/batch") in calls
    assert ("POST", "/org/roundtrip.git/info/lfs/objects/verify") in calls
    assert any(method == "PUT" for method, _ in calls)
    assert ("POST", "/api/models/org/roundtrip/commit/main") in calls
    assert hub.commit_titles("org/roundtrip") == ["add files", "initial commit"]

    for name in ("weights.dat", "config.json", "sub/notes.txt"):
        path = hf_hub_download("org/roundtrip", name)
        assert Path(path).read_bytes() == (folder / name).read_bytes(), name
    snapshot = Path(snapshot_download("org/roundtrip"))
    for name in ("weights.dat", "config.json", "sub/notes.txt"):
        assert (snapshot / name).read_bytes() == (folder / name).read_bytes(), name
    assert (snapshot / ".gitattributes").is_file()

    tree = {f.path: f for f in api.list_repo_tree("org/roundtrip", recursive=True)}
    assert tree["weights.dat"].lfs.size == len(big) and tree["sub/notes.txt"].lfs is None
    info = api.model_info("org/roundtrip", files_metadata=True)
    assert info.sha == commit.oid
    assert {s.rfilename for s in info.siblings} == {".gitattributes", "weights.dat", "config.json", "sub/notes.txt"}


def test_missing_file_revision_and_repo_raise_the_clients_errors(hub):
    api = HfApi(token=TOKEN)
    api.create_repo("org/present")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/present", "missing.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("org/present", ".gitattributes", revision="no-such-branch")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/absent", "config.json")
    assert not api.file_exists("org/present", "missing.json")
    assert api.file_exists("org/present", ".gitattributes")
    assert not api.repo_exists("org/absent")


def test_wrong_or_missing_token_is_401(hub):
    api = HfApi()
    with pytest.raises(HfHubHTTPError) as wrong:
        api.create_repo("org/secret", token=WRONG_TOKEN)
    assert wrong.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as missing:  # no token anywhere: fresh HF_HOME, no HF_TOKEN
        api.create_repo("org/secret")
    assert missing.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as whoami:
        api.whoami(token=WRONG_TOKEN)
    assert whoami.value.response.status_code == 401
    assert not hub.repo_exists("org/secret")
    assert api.whoami(token=TOKEN)["name"] == hub.user


def test_create_repo_twice_conflicts_unless_exist_ok(hub):
    api = HfApi(token=TOKEN)
    api.create_repo("org/twice")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_repo("org/twice")
    assert err.value.response.status_code == 409
    assert api.create_repo("org/twice", exist_ok=True).repo_id == "org/twice"


def test_private_repo_needs_the_token_to_read(hub):
    api = HfApi(token=TOKEN)
    api.create_repo("org/private", private=True)
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="org/private")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/private", "config.json")  # no token
    assert Path(hf_hub_download("org/private", "config.json", token=TOKEN)).read_bytes() == b"{}"


def test_branch_upload_leaves_main_alone(hub):
    api = HfApi(token=TOKEN)
    api.create_repo("org/branches")
    api.upload_file(path_or_fileobj=b"main\n", path_in_repo="which.txt", repo_id="org/branches")
    api.create_branch("org/branches", branch="dev")
    api.upload_file(path_or_fileobj=b"dev\n", path_in_repo="which.txt", repo_id="org/branches", revision="dev")
    assert Path(hf_hub_download("org/branches", "which.txt")).read_bytes() == b"main\n"
    assert Path(hf_hub_download("org/branches", "which.txt", revision="dev")).read_bytes() == b"dev\n"
    assert {b.name for b in api.list_repo_refs("org/branches").branches} == {"main", "dev"}


def test_client_configured_by_environment_alone_in_a_fresh_process(tmp_path):
    """The env of HubTestServer.client_env is enough for a client that reads it at import time."""
    with HubTestServer() as server:
        code = (
            "from huggingface_hub import HfApi, hf_hub_download\n"
            "api = HfApi()\n"  # token from HF_TOKEN
            "api.create_repo('org/env-only')\n"
            "api.upload_file(path_or_fileobj=b'x' * 100, path_in_repo='a.bin', repo_id='org/env-only')\n"
            "print(open(hf_hub_download('org/env-only', 'a.bin'), 'rb').read() == b'x' * 100)\n"
        )
        result = server.run_client(code, hf_home=tmp_path / "hf_home", token=server.token)
        assert result.stdout.strip().endswith("True"), result.stdout
        assert server.files("org/env-only")["a.bin"] == b"x" * 100
        assert not server.errors


def test_server_keeps_repos_on_disk(tmp_path, monkeypatch):
    root = tmp_path / "hub-root"
    with HubTestServer(root=root) as first:
        first.patch_client(monkeypatch, tmp_path / "home1")
        HfApi(token=TOKEN).create_repo("org/kept")
        HfApi(token=TOKEN).upload_file(path_or_fileobj=b"kept", path_in_repo="f.txt", repo_id="org/kept")
    assert (root / "repos" / "models" / "org" / "kept" / "repo.json").is_file()
    with HubTestServer(root=root) as second:
        assert second.files("org/kept")["f.txt"] == b"kept"


# push_folder ------------------------------------------------------------------------------------------------


def test_push_folder_publishes_adapter_with_card(hub, tmp_path):
    folder = make_adapter(tmp_path / "adapter")
    before = snapshot_of(folder)

    url = push_folder(folder, "org/llama-lrs", token=TOKEN)

    assert url.startswith(f"{hub.endpoint}/org/llama-lrs/commit/")
    assert snapshot_of(folder) == before  # the source folder is not touched (no README written into it)
    files = hub.files("org/llama-lrs")
    assert set(files) == {".gitattributes", *before} - {"results.md"} and "results_table.json" in files
    for name, (_, content) in before.items():
        if name == "results.md":  # eval's summary for people stays local (it may hold local paths)
            continue
        if name.endswith(".json"):  # local paths (the eval's adapter folder, the study file) are replaced
            assert str(tmp_path) not in files[name].decode() and "/home/someone" not in files[name].decode(), name
        elif name != "README.md":
            assert files[name] == content, name
    assert json.loads(files["results_table.json"])["metrics"] == json.loads(before["results_table.json"][1])["metrics"]
    assert {"adapter_model.safetensors", "factors.png"} <= hub.lfs_paths("org/llama-lrs")
    config = json.loads(files["adapter_config.json"])
    assert config["base_model_name_or_path"] == SMOLLM2
    assert config["provenance"]["study"]["storage"] == "sqlite:///study.db"

    readme = Path(hf_hub_download("org/llama-lrs", "README.md")).read_text()
    meta = front_matter(readme)
    assert meta["base_model"] == SMOLLM2
    assert meta["library_name"] == "peft"
    assert meta["pipeline_tag"] == "text-generation"
    assert meta["license"] == "apache-2.0"
    assert {"rope", "lrs", "long-context", "lost-in-the-middle"} <= set(meta["tags"])
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == pytest.approx(10 / 12) and metrics["accuracy@position_9"] == pytest.approx(0.75)

    table = factor_table(readme)
    assert sorted(table) == list(range(config["num_layers"]))
    assert [table[i] for i in range(config["num_layers"])] == pytest.approx(config["factors"], abs=5e-5)
    assert "import rope_adapter" in readme
    assert 'PeftModel.from_pretrained(base, "org/llama-lrs")' in readme
    assert f'AutoModelForCausalLM.from_pretrained("{SMOLLM2}")' in readme
    assert "https://arxiv.org/abs/2503.04355" in readme
    assert "![RoPE scaling factor by layer](factors.png)" in readme
    assert "| **lrs** | 1.000 [0.510, 1.000] | 0.750 [0.301, 0.954] | 0.750 [0.301, 0.954] | 0.833" in readme
    assert "NSGAIISampler(population_size=8), seed 1234, storage sqlite:///study.db" in readme
    assert str(tmp_path) not in readme and "/home/someone" not in readme


def test_push_prints_an_absolute_commit_url_when_the_server_answers_a_relative_one(hub, tmp_path, monkeypatch):
    assert absolute_url("/org/x/commit/abc", "https://hub.example/") == "https://hub.example/org/x/commit/abc"
    assert (
        absolute_url("https://hub.example/org/x/commit/abc", "http://other") == "https://hub.example/org/x/commit/abc"
    )
    original = HubHandler._url

    def relative(self, repo, suffix=""):
        url = original(self, repo, suffix)
        return url.removeprefix(hub.endpoint) if suffix.startswith("/commit/") else url

    monkeypatch.setattr(HubHandler, "_url", relative)
    url = push_folder(make_adapter(tmp_path / "adapter", results=False), "org/relative", token=TOKEN)
    assert url.startswith(f"{hub.endpoint}/org/relative/commit/")


def test_push_folder_refreshes_an_existing_readme(hub, tmp_path):
    folder = make_adapter(tmp_path / "adapter", results=False)
    (folder / "README.md").write_text("---\nlibrary_name: peft\n---\n# stale card\n")
    push_folder(folder, "org/refresh", token=TOKEN)
    readme = hub.files("org/refresh")["README.md"].decode()
    assert "stale card" not in readme and "| Layer | Factor |" in readme
    assert (folder / "README.md").read_text() == "---\nlibrary_name: peft\n---\n# stale card\n"
    assert "model-index" not in front_matter(readme)  # no evaluation file, no eval results


def test_push_folder_to_new_branch(hub, tmp_path):
    push_folder(make_adapter(tmp_path / "v1"), "org/branchy", token=TOKEN)
    v2 = make_adapter(tmp_path / "v2", factors=[1.0, 2.0, 2.0, 1.0], results=False)
    push_folder(v2, "org/branchy", revision="experiment", token=TOKEN, commit_message="try a bump")

    assert set(hub.branches("org/branchy")) == {"main", "experiment"}
    assert hub.commit_titles("org/branchy", "experiment")[0] == "try a bump"
    main_config = json.loads(Path(hf_hub_download("org/branchy", "adapter_config.json")).read_text())
    branch_config = json.loads(
        Path(hf_hub_download("org/branchy", "adapter_config.json", revision="experiment")).read_text()
    )
    assert main_config["factors"] == FACTORS and branch_config["factors"] == [1.0, 2.0, 2.0, 1.0]
    branch_readme = Path(hf_hub_download("org/branchy", "README.md", revision="experiment")).read_text()
    assert list(factor_table(branch_readme).values()) == [1.0, 2.0, 2.0, 1.0]

    # a new repo straight onto a branch: repo, branch and commit in one call
    push_folder(v2, "org/fresh", revision="dev", token=TOKEN)
    assert "adapter_config.json" in hub.files("org/fresh", "dev")
    assert "adapter_config.json" not in hub.files("org/fresh", "main")


def test_push_folder_takes_token_from_environment_and_namespace_from_whoami(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    url = push_folder(make_adapter(tmp_path / "adapter"), "mine")
    assert f"/{hub.user}/mine/commit/" in url
    readme = hub.files(f"{hub.user}/mine")["README.md"].decode()
    assert f'PeftModel.from_pretrained(base, "{hub.user}/mine")' in readme


def test_push_folder_wrong_token_is_one_clean_line(hub, tmp_path):
    with pytest.raises(HubPublishError) as err:
        push_folder(make_adapter(tmp_path / "adapter"), "org/denied", token=WRONG_TOKEN)
    message = str(err.value)
    assert "401" in message and "token" in message
    assert WRONG_TOKEN not in message and "\n" not in message
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert not hub.repo_exists("org/denied")


def test_push_folder_without_any_token_fails_before_the_network(hub, tmp_path):
    with pytest.raises(HubPublishError, match="no Hugging Face token"):
        push_folder(make_adapter(tmp_path / "adapter"), "org/anon")
    assert hub.requests == []


def test_push_folder_unreachable_endpoint(tmp_path, monkeypatch):
    with HubTestServer() as gone:
        gone.patch_client(monkeypatch, tmp_path / "hf_home")
    # the server is stopped; the client still points at its port
    with pytest.raises(HubPublishError, match="cannot reach the Hub") as err:
        push_folder(make_adapter(tmp_path / "adapter"), "org/nowhere", token=WRONG_TOKEN)
    assert WRONG_TOKEN not in str(err.value)


def test_push_folder_refuses_bad_folders_before_the_network(hub, tmp_path):
    with pytest.raises(HubPublishError, match="neither adapter_config.json"):
        push_folder(tmp_path, "org/empty", token=TOKEN)
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(HubPublishError, match="not an LRS adapter"):
        push_folder(lora, "org/lora", token=TOKEN)
    edited = make_adapter(tmp_path / "edited")
    config = json.loads((edited / "adapter_config.json").read_text())
    config["factors"][1] = 3.0
    (edited / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(HubPublishError, match="disagree on the factors"):
        push_folder(edited, "org/edited", token=TOKEN)
    assert hub.requests == []


def test_push_folder_adapter_saved_by_the_core_loads_back_with_peft(hub, tmp_path):
    import torch
    from peft import PeftModel, get_peft_model
    from testkit.tiny_models import tiny_model

    import rope_adapter

    model = get_peft_model(tiny_model("llama", num_layers=4), rope_adapter.LrsConfig(factors=FACTORS))
    model.save_pretrained(tmp_path / "saved")
    push_folder(tmp_path / "saved", "org/llama-lrs", token=TOKEN)

    loaded = PeftModel.from_pretrained(tiny_model("llama", num_layers=4), "org/llama-lrs")
    ids = torch.arange(1, 40)[None]
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    readme = hub.files("org/llama-lrs")["README.md"].decode()
    assert list(factor_table(readme).values()) == pytest.approx(FACTORS)
    assert "base_model" not in front_matter(readme)  # a random-init model has no name to record
    assert 'BASE_MODEL = "..."' in readme and "from_pretrained(BASE_MODEL)" in readme


# transformers' from_pretrained through the server ---------------------------------------------------------------


def _upload_tiny_llama(tmp_path: Path) -> Path:
    from testkit.tiny_models import tiny_model

    model = tiny_model("llama", num_layers=2)
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder)
    (folder / "generation_config.json").unlink(missing_ok=True)  # so transformers' optional probe gets a 404
    api = HfApi(token=TOKEN)
    api.create_repo("org/tiny-llama")
    api.upload_folder(folder_path=folder, repo_id="org/tiny-llama")
    return folder


def test_autoconfig_from_pretrained_in_process(hub, tmp_path):
    from transformers import AutoConfig

    _upload_tiny_llama(tmp_path)
    config = AutoConfig.from_pretrained("org/tiny-llama")
    assert config.model_type == "llama" and config.num_hidden_layers == 2


def test_from_pretrained_in_a_fresh_process(hub, tmp_path):
    """AutoConfig and AutoModelForCausalLM resolve files and their 404 probes through the server."""
    folder = _upload_tiny_llama(tmp_path)
    code = (
        "import torch\n"
        "from transformers import AutoConfig, AutoModelForCausalLM\n"
        "config = AutoConfig.from_pretrained('org/tiny-llama')\n"
        "model = AutoModelForCausalLM.from_pretrained('org/tiny-llama')\n"
        "print(config.model_type, config.num_hidden_layers, sum(float(p.detach().double().sum()) for p in model.parameters()))\n"
    )
    result = hub.run_client(code, hf_home=tmp_path / "fresh_home")
    model_type, layers, checksum = result.stdout.split()[-3:]
    assert (model_type, layers) == ("llama", "2")

    from transformers import AutoModelForCausalLM

    local = AutoModelForCausalLM.from_pretrained(folder)
    assert float(checksum) == pytest.approx(sum(float(p.detach().double().sum()) for p in local.parameters()), rel=1e-9)
    probes = {path.rsplit("/", 1)[-1] for method, path, status in hub.requests if method == "HEAD" and status == 404}
    assert {"generation_config.json", "adapter_config.json"} <= probes  # optional files answered EntryNotFound
