"""torch_gpt.py: an independent GPT-2 in PyTorch, and llm.c model-file I/O.

Used as the reference by the tests (Debian's python3-torch) and as the peer
by the benchmarks (any PyTorch). Written from the GPT-2 paper's description,
not from batchscale's C code: pre-LayerNorm blocks, causal attention, tanh
GELU, tied output embedding, learned positions.
"""
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC = 20240326

# llm.c order of tensors; (name, per_layer, shape as a function of cfg)
TENSORS = [
    ("wte", False, lambda c: (c["V"], c["C"])),
    ("wpe", False, lambda c: (c["maxT"], c["C"])),
    ("ln1w", True, lambda c: (c["C"],)),
    ("ln1b", True, lambda c: (c["C"],)),
    ("qkvw", True, lambda c: (3 * c["C"], c["C"])),
    ("qkvb", True, lambda c: (3 * c["C"],)),
    ("attprojw", True, lambda c: (c["C"], c["C"])),
    ("attprojb", True, lambda c: (c["C"],)),
    ("ln2w", True, lambda c: (c["C"],)),
    ("ln2b", True, lambda c: (c["C"],)),
    ("fcw", True, lambda c: (4 * c["C"], c["C"])),
    ("fcb", True, lambda c: (4 * c["C"],)),
    ("fcprojw", True, lambda c: (c["C"], 4 * c["C"])),
    ("fcprojb", True, lambda c: (c["C"],)),
    ("lnfw", False, lambda c: (c["C"],)),
    ("lnfb", False, lambda c: (c["C"],)),
]


def padded_vocab(V):
    return (V + 127) // 128 * 128


def init_params(cfg, seed):
    """GPT-2 style random weights, with LayerNorm weights perturbed so that
    the check exercises them. Returns {name: tensor} (per-layer tensors have a
    leading L dimension)."""
    g = torch.Generator().manual_seed(seed)
    L = cfg["L"]
    p = {}
    for name, per_layer, shape in TENSORS:
        s = shape(cfg)
        full = (L,) + s if per_layer else s
        if name.startswith("ln") and name.endswith("w"):
            t = 1.0 + 0.1 * torch.randn(full, generator=g)
        elif name.endswith("b"):
            t = 0.02 * torch.randn(full, generator=g)
        else:
            std = 0.02 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 0.02
            t = std * torch.randn(full, generator=g)
        p[name] = t.float()
    return p


def write_model(path, cfg, p):
    Vp = padded_vocab(cfg["V"])
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [MODEL_MAGIC, 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["H"], cfg["C"], Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, _, _ in TENSORS:
            t = p[name].detach().contiguous().numpy().astype(np.float32)
            if name == "wte":
                t = np.concatenate([t, np.zeros((Vp - cfg["V"], cfg["C"]), np.float32)])
            f.write(t.tobytes())


def read_model(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == MODEL_MAGIC and header[1] == 3, "not an llm.c fp32 model file"
        cfg = dict(maxT=int(header[2]), V=int(header[3]), L=int(header[4]), H=int(header[5]), C=int(header[6]))
        Vp = int(header[7])
        p = {}
        for name, per_layer, shape in TENSORS:
            s = shape(cfg)
            if name == "wte":
                s = (Vp, cfg["C"])
            full = (cfg["L"],) + s if per_layer else s
            n = int(np.prod(full))
            t = np.frombuffer(f.read(4 * n), dtype=np.float32).reshape(full)
            if name == "wte":
                t = t[: cfg["V"]]
            p[name] = torch.tensor(t.copy())
    return cfg, p


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def causal_attention(q, k, v, mask=None):
    """(B,H,T,hs) each; PyTorch's fused kernel where it has one (2.x), else explicit. mask (B,T,T), True where a
    query may see a key, replaces the causal mask (packed documents)."""
    if mask is None and hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, hs = q.shape[-2], q.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).tril() if mask is None else mask[:, None]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


def moe_top_k(key, K):
    """(N, E) -> (N, K) expert indices: the K largest keys, ties to the lower index, in order of choice."""
    k = key.detach().cpu().numpy()
    return torch.tensor(np.array([sorted(range(k.shape[1]), key=lambda i: (-k[t, i], i))[:K] for t in range(k.shape[0])]))


def moe_mlp(moe, router, experts, bias, x):
    """A Mixture-of-Experts MLP over one capacity group x (N, C), written from the issue's formulas: router logits
    l = x Wr^T; scores softmax(l) or sigmoid(l); the K largest s + bias chosen (bias for selection only), combine
    weights the chosen scores renormalised (moe "gates" normalized, the default) or as they are (unnormalized,
    pre-softmax), times moe "scale" (default 1); capacity ceil(N K / E x factor) per expert (factor 0: none), the lowest
    scores dropped first, ties to the later row; a dropped assignment adds 0. experts: (E, 2FC + F + C) blocks
    fc (F,C), fcb (F), fcproj (C,F), fcprojb (C). Returns out (N, C) and the group's statistics: routed (E), kept
    (E), prob sum (E; the sigmoid's normalised), sum of logsumexp^2, tokens."""
    E, K, Fh = moe["E"], moe["K"], moe["F"]
    N, C = x.shape
    logits = x @ router.t()
    scores = torch.softmax(logits, -1) if moe["router"] == "softmax" else torch.sigmoid(logits)
    chosen = moe_top_k(scores + bias, K)
    picked = scores.gather(1, chosen)
    if moe.get("gates", "normalized") == "normalized":
        picked = picked / picked.sum(1, keepdim=True)
    weights = moe.get("scale", 1.0) * picked
    cap = math.ceil(N * K / E * moe["capacity"]) if moe["capacity"] > 0 else N * K
    out = torch.zeros_like(x)
    kept = [0] * E
    s = scores.detach().cpu().numpy()
    for e in range(E):
        slots = [(t, k) for t in range(N) for k in range(K) if int(chosen[t, k]) == e]
        slots = sorted(slots, key=lambda tk: (-s[tk[0], e], tk[0]))[:cap]
        kept[e] = len(slots)
        if not slots:
            continue
        rows = torch.tensor([t for t, _ in slots])
        w = weights[rows, torch.tensor([k for _, k in slots])]
        blk = experts[e]
        fc, fcb = blk[:Fh * C].view(Fh, C), blk[Fh * C:Fh * C + Fh]
        proj, projb = blk[Fh * C + Fh:2 * Fh * C + Fh].view(C, Fh), blk[2 * Fh * C + Fh:]
        y = gelu_tanh(x[rows] @ fc.t() + fcb) @ proj.t() + projb
        out = out.index_add(0, rows, w[:, None] * y)
    routed = torch.bincount(chosen.reshape(-1), minlength=E).to(x.dtype)
    prob = scores if moe["router"] == "softmax" else scores / scores.sum(1, keepdim=True)
    stats = dict(routed=routed, kept=torch.tensor(kept, dtype=x.dtype), prob=prob.sum(0),
                 lse_sq=(torch.logsumexp(logits, -1) ** 2).sum(), tokens=N)
    return out, stats


def moe_losses(moe, stats):
    """Over the statistics of a whole batch (summed over its groups): aux = c E sum_i f_i P_i, f_i = routed_i /
    (tokens K) (no gradient), P_i = prob_i / tokens; z = c_z sum logsumexp^2 / tokens."""
    n = stats["tokens"]
    f = stats["routed"].detach() / (n * moe["K"])
    aux = moe["aux"] * moe["E"] * (f * stats["prob"] / n).sum()
    return aux, moe["z"] * stats["lse_sq"] / n


def forward(cfg, p, idx, targets=None, attn_mask=None, moe=None, positions=None):
    """idx, targets: (B, T) int64. Returns logits (B,T,V) and mean loss. attn_mask: see causal_attention.
    positions: (B, T) int64, each token's position (packed documents restart theirs), 0..T-1 when None.
    moe (a dict: E, K, F, router, capacity, aux, z, optional every; p then holds router (L,E,C), experts
    (L,E,2FC+F+C) and moe_bias (L,E) beside or instead of the dense MLP): the MLP of layer l with
    (l + 1) % every == 0 (every: 1 if absent) is moe_mlp, each sequence its own capacity group,
    and the mean loss is the language-model loss; the aux and z losses of the whole batch summed over layers are
    returned in moe["losses"] (aux, z) and the per-layer statistics in moe["stats"]."""
    B, T = idx.shape
    C, H, L = cfg["C"], cfg["H"], cfg["L"]
    hs = C // H
    x = p["wte"][idx] + (p["wpe"][:T] if positions is None else p["wpe"][positions])
    if moe is not None:
        moe["losses"], moe["stats"] = (0.0, 0.0), []
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], 1e-5)
        qkv = h @ p["qkvw"][l].t() + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        y = causal_attention(q, k, v, attn_mask).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].t() + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], 1e-5)
        if moe is not None and (l + 1) % moe.get("every", 1) == 0:
            x = x + moe_layer(moe, p, l, h)
            continue
        h = gelu_tanh(h @ p["fcw"][l].t() + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].t() + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
    logits = x @ p["wte"].t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.view(-1, cfg["V"]), targets.reshape(-1))
    return logits, loss


def moe_layer(moe, p, l, h):
    """Layer l's MoE MLP over h (B, T, C), sequence by sequence; its losses added to moe["losses"]."""
    outs, total = [], None
    for b in range(h.shape[0]):
        out, st = moe_mlp(moe, p["router"][l], p["experts"][l], p["moe_bias"][l], h[b])
        outs.append(out)
        total = st if total is None else {k: total[k] + st[k] for k in st}
    aux, z = moe_losses(moe, total)
    moe["losses"] = (moe["losses"][0] + aux, moe["losses"][1] + z)
    moe["stats"].append(total)
    return torch.stack(outs)


def param_groups(p, lr, weight_decay):
    """AdamW groups: decay on matrices and embeddings, not biases or LayerNorm."""
    matrices = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")  # per-layer tensors are stacked, so test names
    decay = [t for n, t in p.items() if n in matrices]
    keep = [t for n, t in p.items() if n not in matrices]
    return [dict(params=decay, weight_decay=weight_decay), dict(params=keep, weight_decay=0.0)]


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())
