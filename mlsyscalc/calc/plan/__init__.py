"""calc/plan/."""
