"""Scaling laws: compute-optimal sizing, loss prediction, the papers' tables, GPU budgets, fits."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "calculators": ("optimal", "predict_loss", "paper_table", "budget", "BudgetOptions"),
    "fit": ("FitOptions", "fit_runs"),
    "laws": ("get_law", "Parametric"),
})
