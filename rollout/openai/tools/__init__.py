"""Tools: tool calls parsed out of a completion's text (tool_parsers.py) and how much of a reply may stream
before its parser has seen it all (tool_stream.py)."""
