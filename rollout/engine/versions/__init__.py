"""Weight versions in flight: update policies, per-token version spans, lossless resume, the direct-write watch."""
