"""Sampling internals: the sampler's filters and exponential race, its seeded noise, the kept mass."""
