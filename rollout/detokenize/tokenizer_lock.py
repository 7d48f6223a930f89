"""The lock around the shared tokenizer: fast tokenizers can refuse concurrent use of one instance
("Already borrowed"), and the server's RPC threads and its detokenizer thread share one."""

from __future__ import annotations

import threading

TOKENIZER_LOCK = threading.Lock()
