"""Pure calculators, one sub-package per subject; each `__init__` names its public functions.

The subjects, from the ground up (a package imports only those above it in this list):

    counts     parameters, FLOPs, attention, saved activations of a ModelSpec
    parallel   how a layout splits the model: tensor/pipeline shards, the expert grid
    comm       collectives, a layout's traffic, what of it is exposed
    roofline   op and model times against a GPU's ceilings (calibrations, steady clocks)
    precision  FP8 / FP4 training recipes
    memory     bytes per GPU for inference and training
    train      one optimizer step of a whole layout
    plan       the search over layouts
    serve      the serving simulation
    scaling    scaling laws
    cost       money, and comparisons of cards
"""
