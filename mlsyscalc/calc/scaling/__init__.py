"""calc/scaling/."""
