"""u32 and u16 tensors through tpk.torch: torch.uint32 and torch.uint16
tensors into .tpk ops that take and return u32/u16 (Philox counters and
keys, the halves of float bits), equal to the NumPy path's results."""
import os

import numpy as np
import pytest
import torch

import tpk
import tpk.torch
from conftest import ROOT

BITS = os.path.join(ROOT, "tests", "corpus", "bits.tpk")
ops = tpk.torch.load(BITS, namespace="tpkbits")
prog = tpk.load(BITS)


def test_u32_tensors_in_and_out():
    rng = np.random.default_rng(32)
    ctr = rng.integers(0, 2**32, size=(100, 4), dtype=np.uint32)
    key = rng.integers(0, 2**32, size=(100, 2), dtype=np.uint32)
    r = ops.philox4x32(torch.from_numpy(ctr), torch.from_numpy(key))
    assert r.dtype == torch.uint32 and r.shape == (100, 4)
    assert np.array_equal(r.numpy(), prog.philox4x32(ctr, key))
    # a known answer of Random123 (kat_vectors: philox4x32_10, all-ones)
    ones = torch.full((1, 4), 0xFFFFFFFF, dtype=torch.uint32)
    r = ops.philox4x32(ones, torch.full((1, 2), 0xFFFFFFFF, dtype=torch.uint32))
    assert r.numpy().tolist() == [[0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]]


def test_u16_outputs():
    x = torch.tensor([1.0, -2.5, 0.0, 3.0e-39, float("inf")], dtype=torch.float32)
    sign, exponent, mantissa, back, halves = ops.float_fields(x)
    assert halves.dtype == torch.uint16 and sign.dtype == torch.uint32
    bits = x.numpy().view(np.uint32)
    assert np.array_equal(halves.numpy(), np.stack([bits & 0xFFFF, bits >> 16], axis=1).astype(np.uint16))
    assert np.array_equal(sign.numpy(), bits >> 31)
    assert torch.equal(back, x)


def test_meta_u32_tensors_give_shapes_and_dtypes():
    meta = ops.philox4x32(torch.empty(5, 4, dtype=torch.uint32, device="meta"),
                          torch.empty(5, 2, dtype=torch.uint32, device="meta"))
    assert meta.dtype == torch.uint32 and meta.shape == (5, 4) and meta.device.type == "meta"


def test_wrong_unsigned_width_names_the_parameter():
    with pytest.raises(TypeError, match="'ctr'"):
        ops.philox4x32(torch.zeros(5, 4, dtype=torch.uint16), torch.zeros(5, 2, dtype=torch.uint32))
