"""`.tpk` kernels the tests register as a user would (tpk.torch.load_source):
a softmax with a temperature and its backward kernel, and an in-place
update. Each test module loads them under a namespace of its own."""

SCALED_SOFTMAX = """
kernel scaled_softmax(x: f32[M, N], t: f32) -> (y: f32[M, N])
  backward scaled_softmax_bwd
  tune BM in [8, 16]
{
  for i in tiles(M, BM) {
    let s = x[i, :] * t;
    let e = exp(s - max(s, axis=1, keepdims=true));
    y[i, :] = e / sum(e, axis=1, keepdims=true);
  }
}

kernel scaled_softmax_bwd(y: f32[M, N], dy: f32[M, N], t: f32) -> (dx: f32[M, N])
  tune BM in [8, 16]
{
  for i in tiles(M, BM) {
    let p = y[i, :];
    let g = dy[i, :];
    dx[i, :] = p * (g - sum(g * p, axis=1, keepdims=true)) * t;
  }
}
"""

AXPY = """
kernel axpy(inout y: f32[N], x: f32[N], a: f32) -> ()
  tune B in [64]
{
  for i in tiles(N, B) {
    y[i] = y[i] + x[i] * a;
  }
}
"""
