"""calc/cost/."""
