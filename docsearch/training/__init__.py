"""Training: one loop (`loop.py`) fed by recipes (fine-tuning, MNTP, SimCSE, NV-Embed, M2)."""
