"""Images as prompt parts, kept apart from the engine core (as vLLM's `vllm/multimodal/`).

image_parts.py: an image as users give it (PIL image, bytes, path, data URL) decoded and bounded;
image_hash.py: the content hash prefix-cache keys carry; families.py: which image-text-to-text models are
served exactly (token counts, layouts, the self-check's probe) and which are refused (and why);
image_prompt.py: prompt ids + images -> `MultiModalInputs` (mm_inputs.py), placeholders expanded as the
model's processor does; processor_parts.py: a processor's parts loaded apart where it cannot be built;
prompt_dicts.py / llm_images.py: vLLM's prompt dicts for the offline `LLM`; chat_images.py: image parts of
chat messages (OpenAI's image_url, vLLM's image / image_pil) taken out, leaving the template's placeholders.
"""
