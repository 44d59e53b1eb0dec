"""Export: base model + LRS adapter as one standalone model folder (``rope-adapter export``).

``import rope_adapter`` registers the ``<type>_lrs`` model types of every tested architecture with
transformers' auto classes (rope_adapter.standalone), so exported folders load without ``trust_remote_code``.
"""

from __future__ import annotations

from rope_adapter.standalone import CodegenError, LrsNames, lrs_classes, lrs_names, register_lrs_model_type

from .bake import ExportResult, export_model
from .plan import CUSTOM_CODE, NATIVE, ExportPlan, linear_rope_parameters, plan_export
from .reading import SIDECAR_NAME, read_exported_factors
from .sources import COPIED_FILE_PATTERNS, check_adapter_fits, check_output_folder
from .staging import ExportError, ExportVerificationError
from .verify import probe_input_ids, verify_export

__all__ = [
    "COPIED_FILE_PATTERNS",
    "CUSTOM_CODE",
    "CodegenError",
    "ExportError",
    "ExportPlan",
    "ExportResult",
    "ExportVerificationError",
    "LrsNames",
    "NATIVE",
    "SIDECAR_NAME",
    "check_adapter_fits",
    "check_output_folder",
    "export_model",
    "linear_rope_parameters",
    "lrs_classes",
    "lrs_names",
    "plan_export",
    "probe_input_ids",
    "read_exported_factors",
    "register_lrs_model_type",
    "verify_export",
]
