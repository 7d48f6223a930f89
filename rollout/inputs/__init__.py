"""What the offline `LLM` accepts, in vLLM's forms: prompts as strings, token ids or TextPrompt / TokensPrompt
dicts (prompt_inputs.py; with images, rollout/multimodal/prompt_dicts.py), and `LLM.chat`'s template options
(chat_template_options.py)."""
