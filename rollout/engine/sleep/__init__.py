"""Sleep mode (vLLM's `LLM.sleep` / `wake_up`): what memory the engine holds, tagged, and how to give it back.

engine_memory.py (EngineMemory: the tags, levels and the checks that keep a sleeping engine from serving),
released_storage.py (a tensor's storage freed in place and restored, its views intact), host_memory.py
(handing freed host pages back to the OS, and the process's resident size).
"""
