"""calc/train/."""
