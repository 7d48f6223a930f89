"""Trainer integrations for `rollout`; each lives in its own subpackage behind its own extra."""
