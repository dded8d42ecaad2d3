"""Every bad input: refused before anything runs, with an error naming the
kernel, the parameter, what it expects and what it got; tpk's own message
where tpk finds the problem; nothing written that the launch did not."""
import os
import subprocess

import numpy as np
import pytest
import torch

import tpk
from conftest import BUILD

x8 = np.arange(64, dtype=np.float32).reshape(8, 8) / 10


def test_wrong_dtype():
    with pytest.raises(TypeError, match=r"kernel 'softmax': parameter 'x' is f32\[M, N\]; the array holds float64"):
        tpk.std.softmax(x8.astype(np.float64))
    with pytest.raises(TypeError, match=r"parameter 'ids' is i32\[T\]; the array holds int64"):
        tpk.std.embedding(x8, np.array([1, 2]))
    with pytest.raises(TypeError, match=r"parameter 'y' is f32\[M, N\]; the array holds torch.float64"):
        tpk.std.softmax.launch([torch.zeros(8, 8), torch.zeros(8, 8, dtype=torch.float64)])


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"parameter 'x' is f32\[M, N\]; it has 2 dimensions, the array 3 \(shape \(1, 8, 8\)\)"):
        tpk.std.softmax(x8[None])
    with pytest.raises(ValueError, match=r"parameter 'w' is f32\[N\]; it has 1 dimension, the array 2 \(shape \(1, 8\)\)"):
        tpk.std.layernorm(x8, x8[:1], x8[0], 1e-5)


def test_sizes_that_disagree_name_both_parameters():
    with pytest.raises(tpk.TpkArgumentError,
                       match=r"kernel 'layernorm': shape symbol N is 8 from 'x' \(dimension 1\) but 7 from 'w' \(dimension 0\)"):
        tpk.std.layernorm(x8, x8[0, :7].copy(), x8[0], 1e-5)
    y = np.zeros((8, 9), np.float32)
    with pytest.raises(ValueError, match=r"shape symbol N is 8 from 'x' \(dimension 1\) but 9 from 'y' \(dimension 1\)"):
        tpk.std.softmax(x8, y)
    assert not y.any()


def test_non_contiguous():
    with pytest.raises(ValueError, match=r"parameter 'x' is f32\[M, N\]; tpk needs C-contiguous memory, but the array of "
                                         r"shape \(8, 8\) has strides \(1, 8\) \(in elements\), where C-contiguous is \(8, 1\)"):
        tpk.std.softmax(x8.T)
    with pytest.raises(ValueError, match=r"shape \(8, 4\) has strides \(8, 2\)"):
        tpk.std.softmax(x8[:, ::2])
    with pytest.raises(ValueError, match=r"parameter 'y'.*shape \(8, 8\) has strides \(1, 8\)"):
        tpk.std.softmax.launch([torch.zeros(8, 8), torch.zeros(8, 8).t()])
    # a dimension of size 1 may have any stride; a row slice is contiguous
    one_row = x8[::5][:1]
    assert one_row.strides == (160, 4)
    np.testing.assert_allclose(tpk.std.softmax(one_row), tpk.std.softmax(x8[:1]))
    assert tpk.std.softmax(x8[2:5]).shape == (3, 8)


def test_not_an_array_and_read_only_outputs():
    with pytest.raises(TypeError, match=r"parameter 'x' is f32\[M, N\]; it takes an array \(a NumPy array, or a CPU "
                                        r"torch tensor\), not list"):
        tpk.std.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError, match=r"parameter 'eps' is f32; it takes a number, not str"):
        tpk.std.layernorm(x8, x8[0], x8[0], "small")
    frozen = np.zeros((8, 8), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"parameter 'y' is f32\[M, N\]; the kernel writes it, but the array is read-only"):
        tpk.std.softmax(x8, frozen)
    read_only_input = np.frombuffer(x8.tobytes(), np.float32).reshape(8, 8)
    assert tpk.std.softmax(read_only_input).shape == (8, 8)  # inputs need not be writable


def test_tensors_not_on_the_cpu():
    meta = torch.empty(8, 8, device="meta")
    with pytest.raises(ValueError, match=r"parameter 'x' is f32\[M, N\]; the tensor is on meta, and tpk runs on CPU"):
        tpk.std.softmax.launch([meta, torch.empty(8, 8)])
    with pytest.raises(ValueError, match="the tensor is on meta"):
        tpk.std.softmax.launch([torch.empty(8, 8), meta])


def test_launch_takes_every_argument():
    y = np.empty_like(x8)
    with pytest.raises(TypeError, match=r"kernel 'softmax' has 2 parameters \(x -> y\); launch\(\) got 1 arguments"):
        tpk.std.softmax.launch([x8])
    with pytest.raises(TypeError, match=r"parameter 'y' is f32\[M, N\]; launch\(\) takes every array, outputs too"):
        tpk.std.softmax.launch([x8, None])
    with pytest.raises(TypeError, match="unexpected keyword argument 'devices'"):
        tpk.std.softmax.launch([x8, y], devices="host")
    with pytest.raises(TypeError, match=r"tune takes a dict of names to ints, not list"):
        tpk.std.softmax.launch([x8, y], tune=[("BM", 8)])
    with pytest.raises(TypeError, match=r"tunable BM takes an int, not float"):
        tpk.std.softmax.launch([x8, y], tune={"BM": 8.0})
    with pytest.raises(tpk.TpkArgumentError, match=r"has no tunable 'BN'; it has BM"):
        tpk.std.softmax.launch([x8, y], tune={"BN": 8})
    with pytest.raises(tpk.TpkArgumentError, match=r"tunable BM is 12 from the launch's tunes, but it is one of \[16, 8, 32, 64\]"):
        tpk.std.softmax.launch([x8, y], tune={"BM": 12})
    with pytest.raises(tpk.TpkArgumentError, match="unknown device 'gpu'"):
        tpk.std.softmax.launch([x8, y], device="gpu")
    with pytest.raises(TypeError, match="a device is a name"):
        tpk.std.softmax.launch([x8, y], device=0)


def test_integer_scalars_must_be_whole():
    param = np.zeros(4, np.float32)
    with pytest.raises(tpk.TpkArgumentError, match=r"scalar 'step' is i32; 1.5 is not a whole number"):
        tpk.std.adamw(param, param.copy(), param.copy(), param.copy(), 0.1, 0.9, 0.99, 1e-8, 0.0, 1.5)


def tpk_check(path):
    proc = subprocess.run([os.path.join(BUILD, "tpk"), "check", str(path)], capture_output=True, text=True)
    assert proc.returncode == 1
    return proc.stderr


BAD = """kernel f(x: f32[N]) -> (y: f32[N]) {
  y = x + z;
}
kernel g(x: f32[N]) -> (y: f32[M]) { y = x; }
"""


def test_a_file_with_errors_says_what_tpk_check_says(tmp_path):
    path = tmp_path / "bad.tpk"
    path.write_text(BAD)
    with pytest.raises(tpk.TpkError) as caught:
        tpk.load(path)
    assert str(caught.value) == tpk_check(path)
    assert "unknown name 'z'" in str(caught.value) and str(caught.value).count("error:") >= 2
    with pytest.raises(tpk.TpkError) as from_text:
        tpk.load_source(BAD, name=str(path))
    assert str(from_text.value) == str(caught.value)
    # however long: every diagnostic (tpk check prints up to 50 errors)
    many = tmp_path / "many.tpk"
    many.write_text("".join(f"kernel k{i}(x: f32[N]) -> (y: f32[N]) {{ y = x + undefined_{i}; }}\n" for i in range(60)))
    with pytest.raises(tpk.TpkError) as caught:
        tpk.load(many)
    assert len(str(caught.value)) > 8192 and str(caught.value) == tpk_check(many)


def test_a_failed_launch_leaves_what_it_did_not_write():
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = np.array([0, 7, 1], np.int32)
    table_before, ids_before = table.copy(), ids.copy()
    with pytest.raises(tpk.TpkArgumentError, match=r"kernel 'embedding' \(std:embedding.tpk\): line \d+: "
                                                   r"gather index 7 is out of range \[0, 5\)"):
        tpk.std.embedding(table, ids)
    assert np.array_equal(table, table_before) and np.array_equal(ids, ids_before)
    # refused before it ran: a given output is untouched too
    out = np.full((3, 4), 42, np.float32)
    with pytest.raises(ValueError, match=r"shape symbol D is 4 from 'table' \(dimension 1\) but 3 from 'out'"):
        tpk.std.embedding(table, np.array([0, 1, 2], np.int32), out[:, :3].copy())
    with pytest.raises(TypeError):
        tpk.std.embedding(table, ids.astype(np.int64), out)
    assert (out == 42).all()
    # convert=True copies back only after a launch that ran
    param = np.ones(4)
    with pytest.raises(tpk.TpkArgumentError):
        tpk.std.adamw(param, param.copy(), param.copy(), param.copy(), 0.1, 0.9, 0.99, 1e-8, 0.0, 1.5, convert=True)
    assert (param == 1).all()
