"""calc/comm/."""
