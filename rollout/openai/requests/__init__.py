"""Requests in: the OpenAI request bodies (schemas.py), their checks (request_checks.py, message_schema.py),
their fields mapped to SamplingParams and StructuredOutputsParams (sampling.py, structured_fields.py), and the
prompt they become (prepare.py; token-in chat: chat_turns.py, prefix_check.py), and the model names a request
may ask for (served_names.py)."""
