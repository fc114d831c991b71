"""Benchmark cases: one module per family (see ARCHITECTURE.md)."""
