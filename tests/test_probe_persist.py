"""The persistent-kernel probe (scripts/probe_persist.py) computes attention: its tile walk, snake order and GQA
indexing checked against the reference under the CPU interpreter, so its GPU timings time a correct kernel."""

from __future__ import annotations

import pytest
import torch

from mlsyscalc.kernels.attention_fwd import attention_ref, interpreting

from .conftest import load_script

pytestmark = pytest.mark.skipif(not interpreting(), reason="checks the kernel logic under TRITON_INTERPRET")


@pytest.mark.parametrize("causal, flatten, q_reg", [(False, True, True), (False, False, False), (True, False, False)])
def test_persistent_kernel_matches_reference(monkeypatch, causal, flatten, q_reg):
    probe = load_script("probe_persist")
    props = type("props", (), {"multi_processor_count": 3})()   # 3 programs: several tiles each, a partial last round
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    torch.manual_seed(0)
    q = torch.randn(2, 4, 72, 16)
    k, v = (torch.randn(2, 2, 72, 16) for _ in range(2))   # GQA: 2 query heads per kv head; 72 = 2.25 tiles of 32
    o, lse = probe.persistent_forward(q, k, v, causal, 32, 16, 4, 1, 0, flatten, True, flatten, 1,
                                      qpre=flatten, q_reg=q_reg)
    ref_o, ref_lse = attention_ref(q, k, v, causal)
    torch.testing.assert_close(o, ref_o, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=1e-5, rtol=1e-5)
