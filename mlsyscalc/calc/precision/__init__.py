"""calc/precision/."""
