"""Image-text-to-text models in the engine: the vision encoder run once per request (vision_model.py) and
its features fed at the image tokens' positions of each step's packed batch (image_embeddings.py)."""
