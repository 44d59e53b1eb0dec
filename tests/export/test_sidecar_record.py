"""lrs_export.json as the export writes it and as its typed record says (export/sidecar.py): a native export
(with vLLM's note and the verification) and a custom-code export hold exactly the keys
:class:`~rope_adapter.export.sidecar.ExportSidecar` names, of the types it gives."""

from __future__ import annotations

import pytest
from peft import get_peft_model
from testkit.records import key_problems
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter import LrsConfig
from rope_adapter.export import SIDECAR_NAME, export_model
from rope_adapter.export.sidecar import ExportSidecar
from rope_adapter.records import read_json


@pytest.mark.parametrize(
    ("factors", "verify", "format_", "keys"),
    [
        (0.5, True, "native", {"vllm"}),  # vLLM serves a factor below 1 shorter: the note is there
        ([1.0, 1.5], False, "custom-code", set()),
    ],
)
def test_the_export_writes_its_sidecar_as_its_record_says(tmp_path, factors, verify, format_, keys):
    model = get_peft_model(tiny_model("llama", num_layers=2), LrsConfig(factors=factors, provenance={"own": [1]}))
    export_model(model, out=tmp_path / "out", tokenizer=byte_tokenizer(), verify=verify)
    sidecar = read_json(tmp_path / "out" / SIDECAR_NAME, ExportSidecar)
    assert key_problems(sidecar, ExportSidecar) == []
    assert sidecar["format"] == format_ and keys <= set(sidecar)
    assert (sidecar["verification"] is not None) == verify
    assert sidecar["provenance"] == {"own": [1]}
