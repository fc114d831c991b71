"""Second, independent value tests for core-quantity mutants that one test function alone killed
(scripts/mutation.py --count-killers; the sites are listed in docs/mutation.md)."""
