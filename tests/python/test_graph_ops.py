"""Every op of tpk's graph vocabulary against PyTorch (torch.ops.aten): one
row per op (more where overloads, broadcasting or dtypes differ), random
inputs, the graph built through tpk._C.Graph, compiled (tpk_graph_compile)
and run on the host; the result's dtype and shape must be ATen's and its
values within tolerance.

Tolerances: f32 rtol 1e-5 (1e-4 for composite ops that sum: softmax, norms,
losses, matmuls, which ATen computes in another order); bf16 one or two
units of its 8-bit mantissa (rtol 2e-2); SDPA 3e-2, because the standard
flash-attention kernels compute with bf16 operands (kernels/attention.tpk).
tpk has no int64: ATen's int64 results (index tensors, sums of integers,
arange) are i32 here, compared by value; index inputs are int64 for torch
and i32 for tpk.

Symbolic sizes: rows marked with `syms` declare some input dims as shape
symbols (B, S) and are run at two sizes with the one graph.
"""
import math

import numpy as np
import pytest
import torch

import tpk
from tpk import _C

aten = torch.ops.aten
F32, BF16, I32, BOOL = torch.float32, torch.bfloat16, torch.int32, torch.bool
FLOATS = (F32, BF16)

TPK_DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
             torch.int64: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


class T:
    """A tensor argument: shape (ints, or names of the case's symbols), how
    its values are drawn, its dtype (None: the row's)."""

    def __init__(self, *shape, kind="randn", dtype=None, index_high=None):
        self.shape, self.kind, self.dtype, self.index_high = shape, kind, dtype, index_high

    def make(self, dtype, sizes, gen):
        shape = tuple(sizes.get(d, d) if isinstance(d, str) else d for d in self.shape)
        dt = self.dtype or dtype
        if self.index_high is not None:  # indices: int64 for torch; "unique": no repeats, "signed": from the end too
            n = self.index_high
            if self.kind == "unique":
                return torch.randperm(n, generator=gen)[:math.prod(shape)].reshape(shape)
            return torch.randint(-n if self.kind == "signed" else 0, n, shape, generator=gen, dtype=torch.int64)
        if self.kind == "bool" or dt == BOOL:
            return torch.rand(shape, generator=gen) < 0.5
        if not dt.is_floating_point:
            return torch.randint(1 if self.kind == "pos" else -5, 6, shape, generator=gen, dtype=dt)
        x = torch.randn(shape, generator=gen, dtype=torch.float32)
        if self.kind == "pos":
            x = x.abs() + 0.5
        elif self.kind == "prob":
            x = torch.softmax(x, -1)
        return x.to(dt)

    def tpk_shape(self):
        return [d for d in self.shape]


class S:
    """A symbolic size for a SymInt argument: its name, and its value in torch."""

    def __init__(self, name):
        self.name = name


class Case:
    def __init__(self, op, *args, dtypes=FLOATS, rtol=None, syms=None, id=None, values=True, **kwargs):
        self.op, self.args, self.kwargs, self.dtypes = op, args, kwargs, dtypes
        self.rtol, self.syms, self.values = rtol, syms, values
        self.id = id or op

    def torch_op(self):
        packet, _, overload = self.op.partition(".")
        p = getattr(aten, packet)
        return getattr(p, overload) if overload else p


def tensors_of(v):
    return [x for x in v if isinstance(x, T)]


C = Case
SUMS = 1e-4  # f32 rtol of ops that sum
CASES = [
    # pointwise, with broadcasting and Scalars
    C("add.Tensor", T(4, 3), T(3), alpha=2.0),
    C("add.Tensor", T(2, 1, 3), T(4, 1), id="add_broadcast_both"),
    C("add.Scalar", T(4, 3), 1.5, dtypes=FLOATS + (I32,)),
    C("add.Tensor", T(4, 3, dtype=I32), T(4, 3, dtype=F32), dtypes=(F32,), id="add_promote_int_float"),
    C("sub.Tensor", T(4, 3), T(4, 3), alpha=0.5),
    C("sub.Scalar", T(5), 2, dtypes=(F32, I32)),
    C("rsub.Scalar", T(5), 2.0),
    C("mul.Tensor", T(3, 4), T(3, 1), dtypes=FLOATS + (I32, BOOL)),
    C("mul.Scalar", T(3, 4), -0.25),
    C("div.Tensor", T(3, 4), T(4, kind="pos")),
    C("div.Tensor", T(6, dtype=I32), T(6, kind="pos", dtype=I32), dtypes=(F32,), id="div_int_true"),
    C("div.Scalar", T(3, 4), 3.0),
    C("div.Tensor_mode", T(8), T(8, kind="pos"), rounding_mode="floor", dtypes=(F32, I32)),
    C("div.Tensor_mode", T(8), T(8, kind="pos"), rounding_mode="trunc", dtypes=(F32, I32)),
    C("neg", T(3, 4), dtypes=FLOATS + (I32,)),
    C("abs", T(3, 4), dtypes=FLOATS + (I32,)),
    C("exp", T(3, 4)),
    C("log", T(3, 4, kind="pos")),
    C("sqrt", T(3, 4, kind="pos")),
    C("rsqrt", T(3, 4, kind="pos")),
    C("tanh", T(3, 4)),
    C("sigmoid", T(3, 4)),
    C("erf", T(3, 4)),
    C("exp", T(6, dtype=I32), dtypes=(F32,), id="exp_of_int"),
    C("relu", T(3, 4), dtypes=FLOATS + (I32,)),
    C("pow.Tensor_Scalar", T(3, 4), 2),
    C("pow.Tensor_Scalar", T(3, 4, kind="pos"), 0.5, id="pow_sqrt"),
    C("pow.Tensor_Scalar", T(3, 4, kind="pos"), 1.7, id="pow_general"),
    C("pow.Tensor_Scalar", T(5, dtype=I32), 3, dtypes=(F32,), id="pow_int"),
    C("pow.Tensor_Tensor", T(3, 4, kind="pos"), T(4)),
    C("pow.Scalar", 2.0, T(3, 4)),
    C("maximum", T(3, 4), T(4), dtypes=FLOATS + (I32,)),
    C("minimum", T(3, 4), T(3, 1), dtypes=FLOATS + (I32,)),
    C("clamp", T(3, 4), min=-0.5, max=0.5),
    C("clamp.Tensor", T(3, 4), T(4), T(3, 1)),
    C("clamp_min", T(3, 4), 0.1),
    C("clamp_max", T(3, 4), 0.1),
    C("hardtanh", T(3, 4), -0.3, 0.7),
    C("leaky_relu", T(3, 4), 0.2),
    C("remainder.Tensor", T(8), T(8, kind="pos"), dtypes=(F32, I32)),
    C("remainder.Scalar", T(8), -3, dtypes=(F32, I32)),
    C("fmod.Tensor", T(8), T(8, kind="pos"), dtypes=(F32, I32)),
    C("bitwise_and.Tensor", T(8), T(8), dtypes=(I32, BOOL)),
    C("bitwise_or.Scalar", T(8), 6, dtypes=(I32,)),
    C("bitwise_not", T(8), dtypes=(I32, BOOL)),
    C("reciprocal", T(8, kind="pos")),
    C("square", T(8), dtypes=FLOATS + (I32,)),
    C("floor", T(8), dtypes=FLOATS + (I32,)),
    C("ceil", T(8)),
    C("trunc", T(8)),
    C("round", T(16)),
    C("sign", T(8), dtypes=FLOATS + (I32,)),
    C("addcmul", T(3, 4), T(3, 4), T(4), value=0.5),
    C("addcdiv", T(3, 4), T(3, 4), T(4, kind="pos"), value=-2.0),
    C("lerp.Scalar", T(3, 4), T(3, 4), 0.25),
    C("lerp.Scalar", T(3, 4), T(3, 4), 0.75, id="lerp_high"),
    C("lerp.Tensor", T(3, 4), T(3, 4), T(4, kind="prob")),
    # comparisons and logic
    C("eq.Scalar", T(8), 1, dtypes=(I32,)),
    C("eq.Tensor", T(3, 4), T(4), dtypes=(I32,)),
    C("ne.Scalar", T(8), -100, dtypes=(I32,)),
    C("lt.Tensor", T(3, 4), T(3, 4)),
    C("le.Scalar", T(3, 4), 0.0),
    C("gt.Scalar", T(3, 4), 0.5, dtypes=(F32, I32)),
    C("ge.Tensor", T(3, 4), T(1, 4)),
    C("logical_and", T(8), T(8), dtypes=(BOOL, I32)),
    C("logical_or", T(8), T(8), dtypes=(BOOL,)),
    C("logical_not", T(8), dtypes=(BOOL, F32)),
    C("where.self", T(3, 4, dtype=BOOL), T(3, 4), T(4)),
    C("where.ScalarOther", T(3, 4, dtype=BOOL), T(3, 4), 0.0),
    C("where.ScalarSelf", T(3, 4, dtype=BOOL), -1.0, T(3, 4)),
    C("masked_fill.Scalar", T(3, 4), T(4, dtype=BOOL), -1e9),
    # reductions
    C("sum", T(3, 4, 5), rtol=SUMS),
    C("sum.dim_IntList", T(3, 4, 5), [0, 2], rtol=SUMS),
    C("sum.dim_IntList", T(3, 4, 5), [-1], True, rtol=SUMS, id="sum_keepdim"),
    C("sum.dim_IntList", T(3, 4), [1], dtypes=(I32, BOOL), id="sum_int"),
    C("sum.dim_IntList", T(3, 4), [1], dtype=F32, dtypes=(BF16,), id="sum_dtype"),
    C("mean", T(3, 4, 5), rtol=SUMS),
    C("mean.dim", T(3, 4, 5), [1], True, rtol=SUMS),
    C("linalg_vector_norm", T(3, 4, 5), rtol=SUMS),
    C("linalg_vector_norm", T(3, 4, 5), 1, [1], True, rtol=SUMS, id="vector_norm_1"),
    C("linalg_vector_norm", T(3, 4, 5), float("inf"), [0, 2], id="vector_norm_inf"),
    C("linalg_vector_norm", T(3, 4), 3.0, [-1], rtol=SUMS, dtypes=(F32,), id="vector_norm_3"),
    C("linalg_vector_norm", T(3, 4), 0, [0], dtypes=(F32,), id="vector_norm_0"),
    C("amax", T(3, 4, 5), [1, 2]),
    C("amin", T(3, 4, 5), [0], True),
    C("max", T(3, 4)),
    C("max.dim", T(3, 5), 1, dtypes=FLOATS + (I32,)),
    C("max.dim", T(3, 5), 0, True, id="max_dim_keepdim"),
    C("max.other", T(3, 4), T(4)),
    C("min.dim", T(3, 5), -1),
    C("argmax", T(3, 5), 1, dtypes=(F32, I32)),
    C("argmax", T(3, 5), id="argmax_flat"),
    C("argmin", T(3, 5), 0, True),
    C("prod", T(6), dtypes=(F32, I32)),
    C("prod.dim_int", T(3, 4), 1, rtol=SUMS),
    C("any", T(3, 4), dtypes=(BOOL, F32)),
    C("any.dim", T(3, 4), 1, dtypes=(BOOL, I32)),
    C("any.dims", T(3, 4, 2), [0, 2], True, dtypes=(BOOL,)),
    C("all.dim", T(3, 4), 0, dtypes=(BOOL,)),
    C("var.correction", T(3, 6), [1], correction=1, rtol=SUMS),
    C("var.dim", T(3, 6), [0], False, True, rtol=SUMS),
    C("logsumexp", T(3, 6), [1], rtol=SUMS),
    # views
    C("view", T(2, 3, 4), [6, -1], dtypes=(F32, I32)),
    C("_unsafe_view", T(2, 3, 4), [4, 6]),
    C("reshape", T(2, 3, 4), [-1]),
    C("expand", T(3, 1), [2, 3, 4]),
    C("expand", T(3, 1), [-1, 5], id="expand_keep"),
    C("permute", T(2, 3, 4), [2, 0, 1]),
    C("t", T(3, 4)),
    C("transpose.int", T(2, 3, 4), 0, -1),
    C("unsqueeze", T(3, 4), -1),
    C("squeeze", T(1, 3, 1)),
    C("squeeze.dim", T(1, 3, 1), 2),
    C("squeeze.dims", T(1, 3, 1), [0, 1]),
    C("select.int", T(3, 4, 5), 1, -1),
    C("slice.Tensor", T(6, 5), 0, 1, 5),
    C("slice.Tensor", T(6, 5), 1, -3, None, id="slice_negative"),
    C("slice.Tensor", T(9, 5), 0, 1, 9, 3, id="slice_step"),
    C("split_with_sizes", T(5, 6), [2, 4], 1),
    C("split.Tensor", T(7, 3), 3),
    C("chunk", T(7, 3), 3),
    C("unbind.int", T(3, 2), 0),
    C("cat", [T(2, 3), T(4, 3)], 0),
    C("cat", [T(2, 3), T(2, 1, dtype=I32)], -1, dtypes=(F32,), id="cat_promote"),
    C("stack", [T(2, 3), T(2, 3)], 1),
    C("flatten.using_ints", T(2, 3, 4), 1),
    C("unflatten.int", T(2, 12), 1, [3, -1]),
    C("expand_as", T(3, 1), T(2, 3, 4)),
    C("repeat", T(2, 3), [2, 1, 2]),
    C("alias", T(3, 4)),
    C("clone", T(3, 4)),
    C("detach", T(3, 4)),
    # creation and conversion
    C("full", [2, 3], 1.5, dtypes=(None,)),
    C("full", [2, 3], 7, dtype=I32, dtypes=(None,), id="full_dtype"),
    C("full_like", T(3, 4), 2.0),
    C("zeros_like", T(3, 4)),
    C("ones_like", T(3, 4), dtype=I32, dtypes=(F32,)),
    C("new_zeros", T(3, 4), [2, 2]),
    C("scalar_tensor", 3.5, dtypes=(None,)),
    C("scalar_tensor", 2, dtype=I32, dtypes=(None,), id="scalar_tensor_int"),
    C("arange", 10, dtypes=(None,)),
    C("arange.start_step", 1, 11, 3, dtypes=(None,)),
    C("arange.start_step", 0.0, 1.0, 0.25, dtypes=(None,), id="arange_float"),
    C("_to_copy", T(3, 4), dtype=BF16, dtypes=(F32,)),
    C("_to_copy", T(3, 4), dtype=I32, dtypes=(F32,), id="to_int"),
    C("_to_copy", T(3, 4), dtype=BOOL, dtypes=(F32, I32), id="to_bool"),
    C("type_as", T(3, 4), T(2, dtype=BF16), dtypes=(F32,)),
    C("copy", T(3, 4), T(4, dtype=F32), dtypes=(F32, BF16)),
    C("fill.Scalar", T(3, 4), 0.5),
    C("fill.Tensor", T(3, 4), T()),
    C("zeros", [2, 3], dtypes=(None,)),
    C("empty.memory_format", [2, 3], dtype=I32, dtypes=(None,), values=False),
    C("empty_like", T(3, 4), values=False),
    C("new_empty", T(3, 4), [5], values=False),
    C("empty_strided", [2, 3], [3, 1], dtypes=(None,), values=False),
    C("new_empty_strided", T(3, 4), [2, 2], [2, 1], values=False),
    C("ones", [2, 3], dtype=BF16, dtypes=(None,)),
    C("new_ones", T(3, 4), [4]),
    C("new_full", T(3, 4), [2, 1], 3.0),
    C("contiguous", T(3, 4)),
    C("softmax.int", T(3, 7), 1, rtol=SUMS),
    C("log_softmax.int", T(3, 7), 0, dtype=F32, rtol=SUMS, dtypes=(BF16,)),
    C("masked_fill.Tensor", T(3, 4), T(3, 1, dtype=BOOL), T()),
    C("min", T(3, 4)),
    C("all", T(3, 4), dtypes=(BOOL,)),
    C("var", T(3, 6), rtol=SUMS),
    C("split.sizes", T(5, 6), [1, 4], 0),
    C("_local_scalar_dense", T(1, 1)),
    # matrix products
    C("mm", T(5, 7), T(7, 3), rtol=SUMS),
    C("bmm", T(2, 5, 7), T(2, 7, 3), rtol=SUMS),
    C("addmm", T(3), T(5, 7), T(7, 3), rtol=SUMS),
    C("addmm", T(5, 3), T(5, 7), T(7, 3), beta=0.5, alpha=2.0, rtol=SUMS, id="addmm_scaled"),
    # gathers and scatters
    C("gather", T(4, 5), 1, T(4, 2, index_high=5)),
    C("gather", T(4, 5, 3), 0, T(2, 5, 3, index_high=4), id="gather_dim0"),
    C("scatter.value", T(4, 5), 1, T(4, 1, index_high=5), 1.0),
    C("scatter.src", T(4, 5), 0, T(1, 5, index_high=4), T(2, 5)),
    C("scatter_add", T(4, 5), 1, T(4, 3, index_high=5), T(4, 3)),
    C("index_select", T(5, 3), 0, T(4, index_high=5)),
    C("index.Tensor", T(6, 4), [T(3, 5, index_high=6, kind="signed")]),
    C("index.Tensor", T(4, 5, 3), [T(6, index_high=4), T(2, 1, index_high=5, kind="signed")], dtypes=(F32, I32),
      id="index_two_dims"),
    C("index_put", T(6, 4), [T(3, 5, index_high=6)], T(3, 5, 4), True, rtol=SUMS, id="index_put_accumulate"),
    C("index_put", T(6, 4), [T(5, index_high=6, kind="unique")], T(4), id="index_put_broadcast_values"),
    C("index_put", T(4, 5, 3), [T(6, index_high=4, kind="signed"), T(2, 1, index_high=5, kind="signed")], T(3), True,
      rtol=SUMS, id="index_put_two_dims"),
    C("index_put", T(3, 4), [T(2, index_high=3, kind="unique"), T(2, index_high=4)], T(2), dtypes=(F32, I32),
      id="index_put_elements"),
    C("index_put_", T(6, 4), [T(7, index_high=6)], T(7, 4), True, rtol=SUMS),
    C("_index_put_impl_", T(6, 4), [T(3, index_high=6, kind="unique")], T(3, 4)),
    C("embedding", T(10, 4), T(2, 3, index_high=10)),
    C("embedding_dense_backward", T(2, 3, 4), T(2, 3, index_high=6), 6, 2, False, dtypes=(F32,)),
    C("select_backward", T(3, 5), [3, 4, 5], 1, 2),
    C("slice_backward", T(3, 2), [3, 6], 1, 1, 5, 2),
    # softmax, norms, activations, losses
    C("_softmax", T(3, 7), 1, False, rtol=SUMS),
    C("_softmax", T(2, 3, 4), 0, False, rtol=SUMS, id="_softmax_dim0"),
    C("_log_softmax", T(3, 7), -1, False, rtol=SUMS),
    C("_softmax_backward_data", T(3, 7), T(3, 7, kind="prob"), 1, F32, dtypes=(F32,), rtol=SUMS),
    C("_log_softmax_backward_data", T(3, 7), T(3, 7), 1, F32, dtypes=(F32,), rtol=SUMS),
    C("native_layer_norm", T(4, 6), [6], T(6), T(6), 1e-5, rtol=SUMS),
    C("native_layer_norm", T(2, 3, 4), [3, 4], None, None, 1e-5, rtol=SUMS, id="layer_norm_2d"),
    C("native_layer_norm_backward", T(4, 6), T(4, 6), [6], T(4, 1), T(4, 1, kind="pos"), T(6), T(6),
      [True, True, True], rtol=SUMS, dtypes=(F32,)),
    C("gelu", T(3, 4)),
    C("gelu", T(3, 4), approximate="tanh", id="gelu_tanh"),
    C("gelu_backward", T(3, 4), T(3, 4), rtol=SUMS),
    C("gelu_backward", T(3, 4), T(3, 4), approximate="tanh", rtol=SUMS, id="gelu_backward_tanh"),
    C("silu", T(3, 4)),
    C("silu_backward", T(3, 4), T(3, 4)),
    C("sigmoid_backward", T(3, 4), T(3, 4)),
    C("tanh_backward", T(3, 4), T(3, 4)),
    C("threshold_backward", T(3, 4), T(3, 4), 0.0),
    C("nll_loss_forward", T(5, 4), T(5, index_high=4), None, 1, -100, rtol=SUMS, dtypes=(F32,)),
    C("nll_loss_forward", T(5, 4), T(5, index_high=4), T(4, kind="pos"), 2, 1, rtol=SUMS, dtypes=(F32,), id="nll_weighted_sum"),
    C("nll_loss_forward", T(5, 4), T(5, index_high=4), None, 0, 2, dtypes=(F32,), id="nll_none"),
    C("nll_loss_backward", T(), T(5, 4), T(5, index_high=4), None, 1, 2, T(kind="pos"), dtypes=(F32,)),
    C("mse_loss", T(3, 4), T(3, 4), rtol=SUMS),
    # in place
    C("add_.Tensor", T(3, 4), T(4), alpha=2.0),
    C("mul_.Scalar", T(3, 4), 0.9),
    C("addcmul_", T(3, 4), T(3, 4), T(3, 4), value=0.1),
    C("addcdiv_", T(3, 4), T(3, 4), T(3, 4, kind="pos"), value=-0.01),
    C("lerp_.Scalar", T(3, 4), T(3, 4), 0.1),
    C("sqrt_", T(3, 4, kind="pos")),
    C("copy_", T(3, 4), T(4)),
    C("sub_.Scalar", T(3, 4), 1.0),
    C("div_.Tensor", T(3, 4), T(3, 4, kind="pos")),
    C("pow_.Scalar", T(3, 4, kind="pos"), 1.5),
    C("clamp_", T(3, 4), -0.5, 0.5),
    C("clamp_min_", T(3, 4), 0.0),
    C("clamp_max_", T(3, 4), 0.0),
    C("exp_", T(3, 4)),
    C("neg_", T(3, 4)),
    C("relu_", T(3, 4)),
    C("fill_.Scalar", T(3, 4), 2.0),
    C("zero_", T(3, 4)),
    C("masked_fill_.Scalar", T(3, 4), T(3, 4, dtype=BOOL), 0.0),
    # symbolic sizes: one graph, run at two sizes
    C("add.Tensor", T("B", 3), T(3), syms={"B": (2, 5)}, id="sym_add"),
    C("_softmax", T("B", "S"), -1, False, syms={"B": (2, 3), "S": (5, 9)}, rtol=SUMS, id="sym_softmax"),
    C("view", T("B", 6), [S("B"), 2, -1], syms={"B": (2, 4)}, id="sym_view"),
    C("view", T("B", "S", 4), [-1, 4], syms={"B": (2, 3), "S": (3, 1)}, id="sym_view_infer"),
    C("sum.dim_IntList", T("B", 4), [0], syms={"B": (3, 7)}, rtol=SUMS, id="sym_sum_rows"),
    C("native_layer_norm", T("B", 6), [6], T(6), T(6), 1e-5, syms={"B": (3, 5)}, rtol=SUMS, id="sym_layer_norm"),
    C("mm", T("B", 7), T(7, 3), syms={"B": (2, 6)}, rtol=SUMS, id="sym_mm"),
    C("select.int", T(3, "S"), 1, -1, syms={"S": (4, 6)}, id="sym_select_last"),
    C("slice.Tensor", T("S", 3), 0, 1, None, syms={"S": (4, 6)}, id="sym_slice"),
    C("arange", S("S"), syms={"S": (4, 7)}, dtypes=(None,), id="sym_arange"),
    C("nll_loss_forward", T("B", 4), T("B", index_high=4), None, 1, -100, syms={"B": (3, 6)}, rtol=SUMS, dtypes=(F32,),
      id="sym_nll"),
]

SDPA_CASES = [
    C("_scaled_dot_product_flash_attention_for_cpu", T(1, 2, 8, 16), T(1, 2, 8, 16), T(1, 2, 8, 16), dtypes=(F32,)),
    C("_scaled_dot_product_flash_attention_for_cpu", T(2, 2, 7, 8), T(2, 2, 7, 8), T(2, 2, 7, 8), is_causal=True,
      dtypes=(F32,), id="sdpa_causal"),
]


def run_graph(g, inputs, syms):
    """The compiled graph on the host: its outputs, floats widened to f32.
    syms gives the sizes no input has (arange's end)."""
    kernel = g.compile()
    outs = kernel(*inputs, convert=True, syms={k: v for k, v in syms.items() if k in kernel.symbols})
    return list(outs) if isinstance(outs, tuple) else [outs]


@pytest.fixture(scope="module")
def runner():
    return run_graph


def tpk_inputs_of(t):
    """tpk takes C-contiguous memory and has no int64."""
    return (t.to(torch.int32) if t.dtype == torch.int64 else t).contiguous()


def check_values(got, want, rtol, what, values=True):
    want = want.detach()
    if not values:  # empty: any contents
        assert np.asarray(got).shape == tuple(want.shape), f"{what}: shape {np.asarray(got).shape}, expected {tuple(want.shape)}"
        return
    if want.dtype == torch.bool:
        np.testing.assert_array_equal(np.asarray(got).astype(bool), want.numpy(), err_msg=what)
        return
    w = want.to(torch.float64).numpy()
    g = np.asarray(torch.as_tensor(np.asarray(got)).to(torch.float64))
    assert g.shape == w.shape, f"{what}: shape {g.shape}, expected {w.shape}"
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


def build_and_run(runner, case, dtype, sizes, gen):
    g = _C.Graph("t")
    torch_args, graph_args, inputs = [], [], []

    def convert(a):
        if isinstance(a, T):
            t = a.make(dtype, sizes, gen)
            shape = [d if isinstance(d, str) and case.syms else (sizes.get(d, d) if isinstance(d, str) else d)
                     for d in a.shape]
            v = g.input(TPK_DTYPE[t.dtype], shape)
            inputs.append(tpk_inputs_of(t))
            return t, v
        if isinstance(a, S):
            return sizes[a.name], _C.Sym(a.name)
        if isinstance(a, list) and any(isinstance(x, (T, S)) for x in a):
            pairs = [convert(x) for x in a]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        return a, a

    for a in case.args:
        t, v = convert(a)
        torch_args.append(t)
        graph_args.append(v)
    torch_kwargs, graph_kwargs = {}, {}
    for k, a in case.kwargs.items():
        torch_kwargs[k], graph_kwargs[k] = convert(a)
    want = case.torch_op()(*[x.clone() if isinstance(x, torch.Tensor) else x for x in torch_args], **torch_kwargs)
    got = g.op(case.op, *graph_args, **graph_kwargs)
    wants = list(want) if isinstance(want, (tuple, list)) else [want]
    gots = list(got) if isinstance(got, tuple) else [got]
    assert len(gots) == len(wants), f"{len(gots)} results, torch gives {len(wants)}"
    pairs = []
    for v, w in zip(gots, wants):
        if w is None:
            continue
        if isinstance(w, torch.Tensor):
            assert v.dtype == TPK_DTYPE[w.dtype], f"result dtype {v.dtype}, ATen's is {w.dtype}"
        else:  # a Python number (_local_scalar_dense): its value
            w = torch.tensor(w)
        pairs.append((v, w))
    g.output(*[v for v, _ in pairs])
    outs = runner(g, inputs, sizes)
    return [(o, w) for o, (_, w) in zip(outs, pairs)]


def case_params(cases):
    return [pytest.param(c, d, id=f"{c.id}-{str(d).replace('torch.', '') if d else 'none'}") for c in cases for d in c.dtypes]


@pytest.mark.parametrize("case,dtype", case_params(CASES))
def test_op(runner, case, dtype):
    gen = torch.Generator().manual_seed(hash(case.id) % 1000)
    rounds = [{k: v[i] for k, v in case.syms.items()} for i in range(2)] if case.syms else [{}]
    for sizes in rounds:
        rtol = case.rtol or 1e-5
        if dtype == BF16:
            rtol = 2e-2
        for i, (got, want) in enumerate(build_and_run(runner, case, dtype, sizes, gen)):
            check_values(got, want, rtol, f"{case.op} result {i} at {sizes}", case.values)


@pytest.mark.parametrize("case,dtype", case_params(SDPA_CASES))
def test_attention(runner, case, dtype):
    gen = torch.Generator().manual_seed(7)
    for got, want in build_and_run(runner, case, dtype, {}, gen):
        check_values(got, want, 3e-2, case.op)


def test_attention_backward(runner):
    """SDPA's backward against autograd of PyTorch's attention."""
    gen = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(1, 2, 6, 8, generator=gen) for _ in range(4))
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    want = aten._scaled_dot_product_flash_attention_for_cpu_backward(do, q, k, v, out, lse, 0.0, True)
    g = _C.Graph("t")
    vq, vk, vv, vdo, vout = (g.input("f32", [1, 2, 6, 8]) for _ in range(5))
    vlse = g.input("f32", [1, 2, 6])
    grads = g.op("_scaled_dot_product_flash_attention_for_cpu_backward", vdo, vq, vk, vv, vout, vlse, 0.0, True)
    g.output(*grads)
    outs = runner(g, [tpk_inputs_of(t) for t in (q, k, v, do, out, lse)], {})  # lse has transposed strides
    for got, w in zip(outs, want):
        check_values(got, w, 3e-2, "sdpa backward")


def test_every_op_has_a_row():
    """A new op in the vocabulary gets a row here."""
    tested = {c.op.partition(".")[0] for c in CASES + SDPA_CASES} | {"_scaled_dot_product_flash_attention_for_cpu_backward"}
    untested = [op for op in _C.graph_ops() if op not in tested]
    assert not untested, f"ops without a row: {untested}"


def test_graph_api():
    """The calls of tpk.h's "Graphs" as the extension exposes them: values'
    dtypes and shapes (symbolic ones as text), results ATen leaves undefined
    as None, the errors (a bad argument is a TpkArgumentError naming the op,
    an op outside the vocabulary a TpkError saying so)."""
    with pytest.raises(tpk.TpkArgumentError, match="the name 'no name' is not an identifier"):
        _C.Graph("no name")
    g = _C.Graph("api")
    x = g.input(torch.bfloat16, ["B*S", 8])
    assert (x.dtype, x.shape) == ("bf16", ("B*S", 8))
    y = g.op("view", x, [_C.Sym("B"), _C.Sym("S"), 8])
    assert y.shape == ("B", "S", 8)
    dx, dw, db = g.op("native_layer_norm_backward", y, y, [8], g.input("bf16", ["B", "S", 1]), g.input("bf16", ["B", "S", 1]),
                      g.input("bf16", [8]), None, [True, False, True])
    assert dx.shape == ("B", "S", 8) and dw is None and db is None
    with pytest.raises(tpk.TpkArgumentError, match=r"add: cannot broadcast self bf16\[B\*S,8\] with other f32\[3\]"):
        g.op("add", x, g.input("f32", [3]))
    with pytest.raises(tpk.TpkError, match="aten op 'frobnicate' is not supported by tpk's graphs"):
        g.op("frobnicate", x)
    with pytest.raises(ValueError, match="a value of another graph"):
        _C.Graph("other").op("neg", x)
    assert len(_C.graph_ops()) == len(set(_C.graph_ops())) > 150
    g.output(dx)
    assert "func @api(%in0: bf16[B*S,8]" in g.ir()
    assert len(g.op("split", g.input("f32", [40]), 1)) == 40  # more results than most ops


def test_a_graph_with_more_parameters_than_a_launch_keeps_on_the_stack():
    """A compiled graph of 100 inputs and 40 outputs (a backward graph's
    size) launches from Python (before: refused above 64 parameters)."""
    g = _C.Graph("many")
    xs = [g.input("f32", [3]) for _ in range(100)]
    g.output(*[g.op("add.Tensor", xs[i], xs[i + 60]) for i in range(40)])
    arrays = [np.full(3, i, dtype=np.float32) for i in range(100)]
    outs = g.compile()(*arrays)
    assert len(outs) == 40
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(3, 2 * i + 60, dtype=np.float32))
