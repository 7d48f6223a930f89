"""Subcommands of the `rollout` CLI; each module registers its own arguments and a `run(args)`."""
