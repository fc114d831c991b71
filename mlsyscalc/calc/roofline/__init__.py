"""calc/roofline/."""
