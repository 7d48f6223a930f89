"""Model admission: loading, the load-time guard, the self-check (its plan, the two forwards it compares, its
half-precision noise reference, the diagnosis of a refusal), routers pinned while checking, derived positions."""
