"""Compiling kernels for Hopper (sm_90) in CPU-only CI: triton's compiler and bundled ptxas need no
driver, but the interpreter that conftest sets for CPU runs replaces @triton.jit, so the compile
runs in a fresh process without TRITON_INTERPRET."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
needs_ptxas = pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")


def run_uninterpreted(*args: str) -> str:
    """`python ARGS` without TRITON_INTERPRET; asserts it exits 0 and returns its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout
