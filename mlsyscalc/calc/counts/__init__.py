"""calc/counts/."""
