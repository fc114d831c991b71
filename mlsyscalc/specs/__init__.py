"""Specs: models (normalised from HF config.json), GPUs and clusters (datasheet JSON files)."""
