"""Modeling: the encoder, the architecture adapters, and the code every shrunk model directory ships.

:mod:`~sparsecse.modeling.modeling_sparsecse` and :mod:`~sparsecse.modeling.configuration_sparsecse` (with
their ``_modern`` siblings) are self-contained (torch + transformers only) so a shrunk directory loads
with ``trust_remote_code=True`` where sparsecse is not installed.
"""

from sparsecse.modeling import adapters_modern  # noqa: F401  (registers today's encoders' adapters)
from sparsecse.modeling.adapters import SHRUNK_CONFIGS, SHRUNK_MODELS, register_auto_classes
from sparsecse.modeling.configuration_sparsecse import ShrunkConfigMixin

__all__ = ["SHRUNK_CONFIGS", "SHRUNK_MODELS", "ShrunkConfigMixin", "register_auto_classes"]
