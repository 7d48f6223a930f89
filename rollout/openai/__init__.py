"""The OpenAI-compatible HTTP front end (`rollout serve --openai-port N`), on the gRPC server's engine loop.

Needs the optional extra `rollout[openai]` (FastAPI + uvicorn); nothing outside this package imports
them. See docs/openai.md.
"""
