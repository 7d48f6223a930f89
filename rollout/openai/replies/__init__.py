"""Responses out: engine outputs -> OpenAI's completion and chat completion objects, with rollout's token-exact
extensions (response_objects.py). Streamed replies are streaming/."""
