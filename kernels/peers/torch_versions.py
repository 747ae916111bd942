"""The workloads in PyTorch, eager (autograd), with its own tools: torch.utils.checkpoint per layer
or block (non-reentrant; "dots" through selective checkpointing, saving matmul outputs),
torch.autograd.Function for the custom softplus and the reversible stack, a Python loop for the
RNN (checkpointed: segments under checkpoint) and for the heat equation (its graph keeps every
iteration; a loop whose trip count is known only at run time has no checkpointed version)."""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from kernels import chain, heat, lstm, rnn, signal
from kernels.peers import Unsupported

MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.matmul.default, torch.ops.aten.bmm.default, torch.ops.aten.mv.default}


def _save_matmuls(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


def _annotated(f, strategy, where):
    if strategy == "none":
        return f, "no annotation"
    if strategy == "dots":
        ctx = functools.partial(create_selective_checkpoint_contexts, _save_matmuls)
        return (lambda *a: checkpoint(f, *a, use_reentrant=False, context_fn=ctx),
                f"torch.utils.checkpoint, selective: saves matmul outputs, {where}")
    return (lambda *a: checkpoint(f, *a, use_reentrant=False)), f"torch.utils.checkpoint {where}"


def _tensors(tree, device):
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tensors(t, device) for t in tree)
    return torch.from_numpy(np.ascontiguousarray(tree)).to(device)


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def _step(loss, args, compiled=False, device="cpu"):
    """compiled: the loss under torch.compile (its defaults); device: where the inputs live."""
    targs = _tensors(args, device)
    loss = torch.compile(loss) if compiled else loss
    wrt = _leaves(targs[0])
    for t in wrt:
        t.requires_grad_(True)

    def value_and_grad():
        value = loss(*targs)
        grads = torch.autograd.grad(value, wrt)
        if device != "cpu":
            torch.cuda.synchronize()
        return value.detach(), grads
    return value_and_grad


def _to_numpy(out):
    value, grads = out
    return float(value), [g.cpu().numpy() for g in grads]


def _chain_layer(x, k):
    return [torch.tanh, torch.sin, lambda v: v * 0.9 + 0.1, lambda v: torch.exp(-v * v)][k % 4](x)


def chain_version(args, strategy, size, **options):
    layers = [_annotated(lambda x, k=k: _chain_layer(x, k), strategy, "per layer") for k in range(chain.LAYERS)]

    def loss(x):
        for f, _ in layers:
            x = f(x)
        return x.sum()
    return layers[0][1], _step(loss, args, **options), _to_numpy


def mlp_version(args, strategy, size, **options):
    layer, how = _annotated(lambda h, w: torch.tanh(h @ w), strategy, "per layer")

    def loss(ws, x, y):
        h = x
        for w in ws:
            h = layer(h, w)
        return ((h - y) ** 2).mean()
    return how, _step(loss, args, **options), _to_numpy


def _layernorm(x, gain, bias):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * gain + bias


def _block(x, *p):
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    h = _layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = torch.softmax(q @ k.T * (1 / np.sqrt(q.shape[-1])), dim=-1)
    x = x + (att @ v) @ wo
    h = _layernorm(x, g2, b2)
    return x + torch.nn.functional.gelu(h @ w1, approximate="tanh") @ w2


def transformer_version(args, strategy, size, **options):
    if strategy == "dropout":
        raise Unsupported("PyTorch's random numbers are not Threefry's: its dropout masks would not be tracekern's "
                          "(JAX's are), so its values would differ")
    block, how = _annotated(_block, strategy, "per block")

    def loss(params, x):
        for p in params:
            x = block(x, *p)
        return (x * x).mean()
    return how, _step(loss, args, **options), _to_numpy


def _residual(v, w):
    return torch.tanh(v @ w)


def _plain_stack(a, b, ws):
    for wf, wg in ws:
        a = a + _residual(b, wf)
        b = b + _residual(a, wg)
    return a, b


class ReversibleStack(torch.autograd.Function):
    """Reversible blocks whose backward rebuilds each block's inputs from its outputs (as RevTorch
    and memcnn do): only the last outputs and the weights are saved."""

    @staticmethod
    def forward(ctx, a, b, *flat_ws):
        ws = list(zip(flat_ws[0::2], flat_ws[1::2]))
        with torch.no_grad():
            y1, y2 = _plain_stack(a, b, ws)
        ctx.save_for_backward(y1, y2, *flat_ws)
        return y1, y2

    @staticmethod
    def backward(ctx, d1, d2):
        x1, x2, *flat_ws = ctx.saved_tensors
        ws = list(zip(flat_ws[0::2], flat_ws[1::2]))
        grads = []
        for wf, wg in reversed(ws):
            g_out = _residual(x1, wg)
            dz = d2 * (1 - g_out * g_out)
            d1, dwg = d1 + dz @ wg.T, x1.T @ dz
            x2 = x2 - g_out
            f_out = _residual(x2, wf)
            dz = d1 * (1 - f_out * f_out)
            d2, dwf = d2 + dz @ wf.T, x2.T @ dz
            x1 = x1 - f_out
            grads += [dwg, dwf]
        return (d1, d2, *grads[::-1])


def revnet_version(args, strategy, size, **options):
    def loss(ws, x1, x2):
        if strategy == "reversible":
            a, b = ReversibleStack.apply(x1, x2, *[w for pair in ws for w in pair])
        else:
            a, b = _plain_stack(x1, x2, ws)
        return (a * a).mean() + (b * b).mean()
    how = "torch.autograd.Function over the stack, rebuilding inputs from outputs" if strategy == "reversible" else "no annotation"
    return how, _step(loss, args, **options), _to_numpy


class Log1pexp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        e = torch.exp(-x.abs())
        ctx.save_for_backward(x, e)
        return torch.clamp(x, min=0) + torch.log1p(e)

    @staticmethod
    def backward(ctx, upstream):
        x, e = ctx.saved_tensors
        return upstream * torch.where(x >= 0, 1 / (1 + e), e / (1 + e))


def softplus_version(args, strategy, size, **options):
    f = Log1pexp.apply if strategy == "custom" else (lambda z: torch.log(1 + torch.exp(z)))

    def loss(w, X, y):
        return f(-y * (X @ w)).mean()
    return ("torch.autograd.Function" if strategy == "custom" else "naive formula"), _step(loss, args, **options), _to_numpy


def _segments(steps: int, k: int) -> int:
    return max(d for d in range(1, min(k, steps) + 1) if steps % d == 0)


def rnn_version(args, strategy, size, **options):
    k = rnn.checkpoints(strategy)
    steps = args[1].shape[0]

    def run(a, h, xs):
        ys = []
        for x in xs:
            h = torch.tanh(a * h + x)
            ys.append(h.mean())
        return h, torch.stack(ys)

    def loss(a, xs):
        h = torch.zeros_like(a)
        if k is None:
            h, ys = run(a, h, xs)
        else:
            parts = []
            for xseg in torch.chunk(xs, _segments(steps, k)):
                h, y = checkpoint(run, a, h, xseg, use_reentrant=False)
                parts.append(y)
            ys = torch.cat(parts)
        return (h * h).mean() + ys.mean()
    how = ("a Python loop over the steps" if k is None else f"{_segments(steps, k)} segments of the loop, each under "
           "torch.utils.checkpoint (two levels: PyTorch has no binomial schedule)")
    return how, _step(loss, args, **options), _to_numpy


def heat_version(args, strategy, size, **options):
    if strategy != "none":
        raise Unsupported("PyTorch: torch.utils.checkpoint needs its segments before the loop runs; "
                          "a loop whose trip count is known only at run time has no checkpointed version")
    cells, threshold = heat.SIZES[size]
    grid = torch.from_numpy(heat.weights(cells))
    zero = torch.zeros(1)

    def loss(u0):
        u = u0
        while u.max() > threshold:
            u = u + heat.RATE * (torch.cat([zero, u[:-1]]) - 2 * u + torch.cat([u[1:], zero]))
        return (u * u * grid).sum()
    return "a Python while loop (autograd keeps every iteration)", _step(loss, args, **options), _to_numpy


def signal_version(args, strategy, size, **options):
    k = signal.SIZES[size][-1]

    def loss(taps, x, target):
        n, t = x.shape[1], taps.shape[0]
        idx = torch.as_tensor(np.arange(n - t + 1)[:, None] + np.arange(t), device=x.device)
        y = torch.einsum("bmt,t->bm", x[:, idx], taps)
        energy = torch.cumsum(y * y, dim=1)
        top = torch.take_along_dim(y, torch.argsort(y, dim=1)[:, -k:], dim=1)
        m = y.shape[1]
        f = torch.cat([energy[:, -1:] / m, energy[:, m // 2 - 1:m // 2] / (m // 2), y.mean(1, keepdim=True), top], dim=1)
        gram = torch.einsum("bi,bj->ij", f, f) + signal.RIDGE * torch.eye(f.shape[1], dtype=f.dtype, device=f.device)
        coef = torch.linalg.solve(gram, f.T @ target)
        return ((f @ coef - target) ** 2).mean()
    return "the same operations in torch", _step(loss, args, **options), _to_numpy


def lstm_version(args, strategy, size, **options):
    """nn.LSTM (PyTorch's own fused LSTM), run with tracekern's weights (functional_call: its
    weight_ih is our wx transposed; bias_hh zero), and the same log-softmax loss."""
    (layers, _), xs, _ = args
    steps, vocab = xs.shape
    hidden = layers[0][1].shape[0]
    module = torch.nn.LSTM(vocab, hidden, num_layers=len(layers))
    zero = torch.zeros(4 * hidden)

    def run(weights, x, h, c):
        out, (h, c) = torch.func.functional_call(module, weights, (x, (h, c)))
        return out, h, c

    def loss(params, xs, targets):
        layers, (wout, bout) = params
        weights = {}
        for k, (wx, wh, b) in enumerate(layers):
            weights.update({f"weight_ih_l{k}": wx.T, f"weight_hh_l{k}": wh.T, f"bias_ih_l{k}": b, f"bias_hh_l{k}": zero})
        h = c = torch.zeros(len(layers), hidden)
        if strategy == "none":
            out, _, _ = run(weights, xs, h, c)
        else:
            parts = []
            for xseg in torch.chunk(xs, lstm.segments(steps)):
                out, h, c = checkpoint(run, weights, xseg, h, c, use_reentrant=False)
                parts.append(out)
            out = torch.cat(parts)
        logp = torch.log_softmax(out @ wout + bout, dim=-1)
        return -(targets * logp).sum(-1).mean()
    how = ("nn.LSTM" if strategy == "none" else f"nn.LSTM over {lstm.segments(steps)} segments, each under "
           "torch.utils.checkpoint (two levels: the memory of checkpoint='auto')")
    return how, _step(loss, args, **options), _to_numpy


VERSIONS = {"chain": chain_version, "mlp": mlp_version, "transformer": transformer_version, "revnet": revnet_version,
            "softplus": softplus_version, "rnn": rnn_version, "heat": heat_version, "signal": signal_version,
            "lstm": lstm_version}
