"""A one-block character GPT and its training step: the model the device
tests (test_device.py) train on tpk against the CPU and bench/bench_device.py
times, kept in one place.

Embedding, layernorm, causal attention through F.scaled_dot_product_attention,
an MLP with GELU, a head; a step is cross-entropy, backward, gradient clipping
and AdamW, as in PyTorch's examples.
"""
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    """A one-block character GPT: embedding, layernorm, causal attention
    through F.scaled_dot_product_attention, an MLP, a head."""

    def __init__(self, dim=32, heads=4, vocab=50):
        super().__init__()
        self.heads = heads
        self.vocab = vocab
        self.emb = torch.nn.Embedding(vocab, dim)
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return self.head(x + self.mlp(self.ln2(x)))


def synthetic_text(vocab=50, batch=4, length=17, seed=1):
    """batch sequences of length character ids (inputs and next-character targets)."""
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def make(device, seed=0, **sizes):
    """The model on device (weights from seed, as on any device) and its AdamW."""
    torch.manual_seed(seed)
    model = Block(**sizes).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def step(model, opt, text, device):
    """One training step on text (a CPU tensor of ids); the loss, on device
    (reading it, loss.item(), is a sync point)."""
    logits = model(text[:, :-1].to(device))
    loss = F.cross_entropy(logits.reshape(-1, model.vocab), text[:, 1:].reshape(-1).to(device))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss
