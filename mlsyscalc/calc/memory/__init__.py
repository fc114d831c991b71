"""calc/memory/."""
