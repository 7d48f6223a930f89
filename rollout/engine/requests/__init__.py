"""What a request asks for: Request and its sequences (request.py), and whether the engine can take it
(validation.py)."""
