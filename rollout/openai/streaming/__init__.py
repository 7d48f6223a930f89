"""Streaming (`stream: true`): a request's loop events -> chunk choices (stream_deltas.py, choice_stream.py),
written as server-sent events (sse.py)."""
