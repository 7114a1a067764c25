"""The character-level GPT of `./dev bench-peers gpt` in PyTorch: nanoGPT's model and its CPU
configuration for tiny Shakespeare, written here from its published description so that the
Python loops time the same model as examples/torch/gpt.hpp.

The model: token and position embeddings, n_layer pre-LayerNorm blocks (causal self-attention
through F.scaled_dot_product_attention(is_causal=True), then a 4x GELU MLP, each added to the
residual stream), a final LayerNorm and a head tied to the token embedding; no biases anywhere
(LayerNorm weights only, eps 1e-5). Initialisation: every Linear and Embedding weight N(0, 0.02),
the residual projections (attention's and the MLP's c_proj) N(0, 0.02 / sqrt(2 n_layer)).
The optimizer: AdamW(lr 1e-3, betas (0.9, 0.99), eps 1e-8) with two parameter groups, weight
decay 0.1 on the tensors of two or more dimensions (matmul weights and the embeddings) and 0 on
the rest (the LayerNorm weights). Gradients clipped to a norm of 1.0 before every update.
The data: the 65 characters of the text sorted by code point, the first 90 % of it for training,
batches of `batch` windows of `block` characters at offsets drawn uniformly from
[0, len - block), the targets shifted by one.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    block: int = 64
    batch: int = 12
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    vocab: int = 65
    learning_rate: float = 1e-3
    betas: tuple = (0.9, 0.99)
    weight_decay: float = 0.1
    clip: float = 1.0


class LayerNorm(nn.Module):
    """LayerNorm with a weight and no bias."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c.n_head, c.n_embd
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(c.n_embd), Attention(c)
        self.ln_2, self.mlp = LayerNorm(c.n_embd), Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.n_embd)
        self.wpe = nn.Embedding(c.block, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def loss(self, idx, targets):
        logits = self(idx)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def make_model(c, seed=1337):
    torch.manual_seed(seed)
    return GPT(c)


def param_groups(model, c):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": c.weight_decay},
            {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model, c):
    return torch.optim.AdamW(param_groups(model, c), lr=c.learning_rate, betas=c.betas, eps=1e-8)


def load_text(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    split = int(0.9 * len(data))
    return data[:split], data[split:], len(chars)


def batch_stream(train, c, seed=1337):
    """Endless (inputs, targets) batches of the training split, nanoGPT's get_batch."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(c.block)
    while True:
        starts = torch.randint(len(train) - c.block, (c.batch,), generator=generator)
        rows = starts[:, None] + offsets
        yield train[rows], train[rows + 1]
