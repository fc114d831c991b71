"""calc/serve/."""
