"""The transformers adapter: the paged-attention bridge and the fused forwards swapped into HF modules."""
