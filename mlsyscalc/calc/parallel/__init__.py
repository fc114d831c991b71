"""calc/parallel/."""
