"""Images as prompt parts, kept apart from the engine core (as vLLM's `vllm/multimodal/`).

image_parts.py: an image as users give it (PIL image, bytes, path, data URL) decoded and bounded;
image_hash.py: the content hash prefix-cache keys carry; families.py: which image-text-to-text models are
served exactly and which are refused (and why); image_prompt.py: prompt + images -> `MultiModalInputs`
(mm_inputs.py), the placeholders expanded as the model's processor does; prompt_dicts.py: vLLM's prompt dicts.
"""
