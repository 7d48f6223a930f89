"""The OpenAI-compatible HTTP front end (`rollout serve --openai-port N`), on the gRPC server's engine loop.

Needs the optional extra `rollout[openai]` (FastAPI + uvicorn); nothing outside this package imports
them. See docs/openai.md.

At the top, the HTTP service (app.py routes, server.py under uvicorn, frontend.py on the engine loop, guard.py and
admission_gate.py at the door, errors.py); below, by direction: requests/ (in), replies/ (out), streaming/, tools/.
"""
