"""SamplingParams and the checks of its settings, in one home: the class (sampling_params.py), its logits
processors' settings (logits_settings.py) and the field checks every settings object and front end shares
(field_checks.py). `from rollout.sampling_params import SamplingParams` is the public path (and vLLM's), as is
`from rollout.sampling_params import StructuredOutputsParams` (vLLM's path; its home is rollout/structured_outputs/)."""

from rollout.sampling_params.sampling_params import SamplingParams
from rollout.structured_outputs.structured_outputs import StructuredOutputsParams

__all__ = ["SamplingParams", "StructuredOutputsParams"]
