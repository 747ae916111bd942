"""Contractions: matmul, dot, vdot, inner, outer, tensordot, einsum, kron, cross, vecdot, matvec,
vecmat.

einsum contracts its operands pairwise in the order np.einsum_path chooses (greedy by default,
"optimal" on request). A pair that sums over an axis of more than one element and keeps more than
a vector is lowered to matmul (BLAS on cpu): each operand transposed to (batch, kept, summed) and
reshaped to a matrix, both views. Any other pair (an outer product, a batched dot) is a broadcast
multiply and a sum, which fuse into one loop."""
from __future__ import annotations

import builtins
import math
import string

import numpy as np

from ._core import (
    P,
    ShapeError,
    Tracer,
    _array,
    _axis,
    _cast,
    _check_dtype,
    _dtype,
    _promote,
    _reject,
    _result_dtype,
    _shape,
    bind,
    with_location,
)
from .reductions import sum as _sum
from .shapes import broadcast_to, diagonal, moveaxis, ravel, reshape, stack, transpose
from .ufuncs import conj, multiply, subtract


def matmul(a, b, /, out=None, **kwargs):
    """a @ b with NumPy's rules: 1-D operands promoted and then dropped, batch dims broadcast."""
    _reject("matmul", out=out)
    a, b = _array(a, "matmul"), _array(b, "matmul")
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        raise ShapeError(with_location(f"matmul: operands must be at least 1-D, got shapes {sa} and {sb}; use * for scalars"))
    a, b = _promote("matmul", a, b)
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    s2a, s2b = _shape(a2), _shape(b2)
    if s2a[-1] != s2b[-2]:
        raise ShapeError(with_location(
            f"matmul: shapes {sa} and {sb} do not align: the last axis of the first ({s2a[-1]}) must equal "
            f"the {'only' if len(sb) == 1 else 'second-to-last'} axis of the second ({s2b[-2]}). "
            "Transpose an operand (x.T) or check its shape."))
    try:
        batch = tuple(np.broadcast_shapes(s2a[:-2], s2b[:-2]))
    except ValueError:
        raise ShapeError(with_location(f"matmul: batch dimensions of shapes {sa} and {sb} do not broadcast")) from None
    a2 = broadcast_to(a2, batch + s2a[-2:])
    b2 = broadcast_to(b2, batch + s2b[-2:])
    y = bind(P.matmul, a2, b2)
    out_shape = batch + (s2a[-2],) * (len(sa) > 1) + (s2b[-1],) * (len(sb) > 1)
    return reshape(y, out_shape)


def _not_weak(x):
    """np.dot, inner and vdot read a Python number as an array (float64), not as a weak scalar: a literal, and
    a Python-number argument (weak while traced: np.dot(x32, s) is float64, as NumPy's)."""
    if isinstance(x, Tracer) and x.weak:
        return Tracer(x.builder, x.ir_var, False)
    return np.asarray(x) if isinstance(x, (int, float, complex)) and not isinstance(x, bool) else x


def dot(a, b, out=None):
    _reject("dot", out=out)
    a, b = _not_weak(_array(a, "dot")), _not_weak(_array(b, "dot"))
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([len(sa) - 1], [builtins.max(len(sb) - 2, 0)]))


def vdot(a, b, /):
    return dot(conj(ravel(_array(a, "vdot"))), ravel(_array(b, "vdot")))


def inner(a, b, /):
    a, b = _not_weak(_array(a, "inner")), _not_weak(_array(b, "inner"))
    if not _shape(a) or not _shape(b):
        return multiply(a, b)
    return tensordot(a, b, axes=([len(_shape(a)) - 1], [len(_shape(b)) - 1]))


def outer(a, b, out=None):
    _reject("outer", out=out)
    a, b = ravel(_array(a, "outer")), ravel(_array(b, "outer"))
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2):
    a, b = _not_weak(_array(a, "tensordot")), _not_weak(_array(b, "tensordot"))
    na, nb = len(_shape(a)), len(_shape(b))
    if isinstance(axes, (int, np.integer)):
        k = int(axes)
        ax_a, ax_b = list(range(na - k, na)), list(range(k))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
    ax_a = [_axis(x, na, "tensordot") for x in ax_a]
    ax_b = [_axis(x, nb, "tensordot") for x in ax_b]
    if len(ax_a) != len(ax_b) or any(_shape(a)[i] != _shape(b)[j] for i, j in zip(ax_a, ax_b)):
        raise ShapeError(with_location(f"tensordot: shape-mismatch for sum: {_shape(a)} axes {ax_a} and {_shape(b)} "
                                       f"axes {ax_b}"))
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(na)]
    lb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def kron(a, b):
    a, b = _array(a, "kron"), _array(b, "kron")
    nd = builtins.max(len(_shape(a)), len(_shape(b)))
    sa = (1,) * (nd - len(_shape(a))) + _shape(a)
    sb = (1,) * (nd - len(_shape(b))) + _shape(b)
    ai = reshape(a, tuple(v for s in sa for v in (s, 1)))
    bi = reshape(b, tuple(v for s in sb for v in (1, s)))
    return reshape(multiply(ai, bi), tuple(x * y for x, y in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of 3-vectors (and of 2-vectors, whose result is the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(_array(a, "cross"), axisa, -1)
    b = moveaxis(_array(b, "cross"), axisb, -1)
    a, b = _promote("cross", a, b)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError(with_location("cross: incompatible dimensions for cross product (dimension must be 2 or 3)"))
    comp = lambda v, i, n: v[..., i] if i < n else None   # noqa: E731
    a0, a1, a2 = (comp(a, i, na) for i in range(3))
    b0, b1, b2 = (comp(b, i, nb) for i in range(3))
    if na == 2 and nb == 2:
        return subtract(multiply(a0, b1), multiply(a1, b0))
    mul = lambda x, y: None if x is None or y is None else multiply(x, y)   # noqa: E731

    def sub(x, y):
        if x is None:
            return multiply(y, -1)
        return x if y is None else subtract(x, y)

    c = _stack3(sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2)), sub(mul(a0, b1), mul(a1, b0)))
    return moveaxis(c, -1, axisc)


def _stack3(c0, c1, c2):
    shape = tuple(np.broadcast_shapes(_shape(c0), _shape(c1), _shape(c2)))
    return stack([broadcast_to(c, shape) for c in (c0, c1, c2)], axis=-1)


def vecdot(x1, x2, /, *, axis=-1):
    """sum(conj(x1) * x2) over axis (NumPy's conjugates the first vector)."""
    x1, x2 = _promote("vecdot", _array(x1, "vecdot"), _array(x2, "vecdot"))
    p = multiply(conj(x1), x2)
    return _sum(p, axis=axis, dtype=_dtype(p))   # (a contraction keeps its operands' dtype: int32 stays int32)


def matvec(x1, x2, /):
    return matmul(x1, reshape(x2, _shape(x2) + (1,)))[..., 0]


def vecmat(x1, x2, /):
    """conj(x1) @ x2 (NumPy's conjugates the vector)."""
    x1 = conj(_array(x1, "vecmat"))
    return matmul(reshape(x1, _shape(x1)[:-1] + (1,) + _shape(x1)[-1:]), x2)[..., 0, :]


# ----------------------------------------------------------------------------- einsum


def _parse(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """The subscripts with '...' replaced by letters of their own, and the explicit output."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        lhs, out = subscripts.split("->")
    else:
        lhs, out = subscripts, None
    ins = lhs.split(",")
    if len(ins) != len(shapes):
        raise ValueError(with_location(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands"))
    used = set(c for c in subscripts if c.isalpha())
    spare = [c for c in string.ascii_letters if c not in used]
    n_ell = builtins.max([len(s) - (len(t) - 3) for t, s in zip(ins, shapes) if "..." in t] or [0])
    ell = "".join(spare[:n_ell])
    expanded = []
    for t, s in zip(ins, shapes):
        if "..." in t:
            k = len(s) - (len(t) - 3)
            t = t.replace("...", ell[n_ell - k:] if k else "")
        if len(t) != len(s):
            raise ValueError(with_location(f"einsum: subscripts {t!r} do not match an operand of shape {s}"))
        expanded.append(t)
    if out is None:
        counts = {c: "".join(expanded).count(c) for c in set("".join(expanded))}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    elif "..." in out:
        out = out.replace("...", ell)
    elif n_ell:
        raise ValueError(with_location(
            f"einsum: the ellipsis of {lhs!r} covers {n_ell} dimension(s) that the output {out!r} drops; NumPy raises "
            "here. Write '...' in the output to keep them, or sum them explicitly (np.einsum(...).sum(axis))"))
    return expanded, out


def _diagonal_labels(x, labels: str):
    """Repeated labels within one operand: take the diagonal (np.einsum('ii->i'))."""
    while True:
        dup = next((c for c in labels if labels.count(c) > 1), None)
        if dup is None:
            return x, labels
        i = labels.index(dup)
        j = labels.index(dup, i + 1)
        x = diagonal(x, 0, i, j)
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + dup


def _sum_out(x, labels: str, keep: set):
    axes = tuple(k for k, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return _sum(x, axis=axes, dtype=_dtype(x)), "".join(c for c in labels if c in keep)   # (int32 stays int32, as NumPy)


def _arranged(x, labels: str, order: str, sizes: dict):
    """x with its axes in `order` (labels it lacks as size-1 axes)."""
    present = [c for c in order if c in labels]
    x = transpose(x, [labels.index(c) for c in present])
    return reshape(x, tuple(_shape(x)[present.index(c)] if c in labels else 1 for c in order))


def _pair(a, la: str, b, lb: str, keep: set, sizes: dict):
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    free_a = [c for c in la if c not in lb]
    free_b = [c for c in lb if c not in la]
    size = lambda cs: math.prod(sizes[c] for c in cs)   # noqa: E731
    for c in batch + summed:   # (broadcasting: a size-1 axis against a longer one)
        for x_, l_ in ((a, la), (b, lb)):
            if _shape(x_)[l_.index(c)] != sizes[c] and _shape(x_)[l_.index(c)] != 1:
                raise ShapeError(with_location(f"einsum: operands disagree on the size of {c!r}"))
    k, m, n = size(summed), size(free_a), size(free_b)
    out_labels = "".join(batch + free_a + free_b)
    if k > 1 and (m > 1 or n > 1):   # a matmul: (batch, m, k) @ (batch, k, n)
        bshape = tuple(sizes[c] for c in batch)
        am = broadcast_to(_arranged(a, la, "".join(batch + free_a + summed), sizes), bshape + tuple(
            sizes[c] for c in free_a + summed))
        bm = broadcast_to(_arranged(b, lb, "".join(batch + summed + free_b), sizes), bshape + tuple(
            sizes[c] for c in summed + free_b))
        y = bind(P.matmul, reshape(am, bshape + (m, k)), reshape(bm, bshape + (k, n)))
        return reshape(y, bshape + tuple(sizes[c] for c in free_a + free_b)), out_labels
    order = "".join(batch + free_a + free_b + summed)
    prod_ = multiply(_arranged(a, la, order, sizes), _arranged(b, lb, order, sizes))
    prod_ = broadcast_to(prod_, tuple(sizes[c] for c in order))
    axes = tuple(range(len(order) - len(summed), len(order)))
    return (_sum(prod_, axis=axes, dtype=_dtype(prod_)) if axes else prod_), out_labels


def einsum(*operands, out=None, dtype=None, order="K", casting="safe", optimize=True):
    """np.einsum (both calling forms), contracted pairwise in np.einsum_path's order."""
    _reject("einsum", out=out)
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:   # einsum(op0, sublist0, op1, sublist1, ..., [sublistout])
        ops, rest = list(operands), None
        if len(ops) % 2:
            rest = ops.pop()
        arrays = ops[0::2]
        to = lambda sub: "".join("..." if s is Ellipsis else string.ascii_letters[s] for s in sub)   # noqa: E731
        subscripts = ",".join(to(s) for s in ops[1::2]) + ("" if rest is None else "->" + to(rest))
    arrays = [_not_weak(_array(x, "einsum")) for x in arrays]   # (np.einsum reads Python numbers as arrays)
    target = _result_dtype("einsum", *arrays) if dtype is None else _check_dtype(dtype, "einsum")
    for x in arrays:
        if not np.can_cast(_dtype(x), target, casting):
            raise TypeError(with_location(
                f"einsum: an operand of dtype {_dtype(x)} cannot be cast to {target} under casting={casting!r} "
                "(NumPy raises here); pass casting='same_kind' or 'unsafe', or cast the operand with .astype"))
    arrays = [_cast(x, target) for x in arrays]
    ins, out_labels = _parse(subscripts, [_shape(x) for x in arrays])
    sizes: dict = {}
    for t, x in zip(ins, arrays):
        for c in set(t):
            dims = {s for c2, s in zip(t, _shape(x)) if c2 == c}
            if len(dims) > 1:   # (a repeated label takes a diagonal: no broadcasting within an operand)
                raise ValueError(with_location(f"einsum: the repeated label {c!r} of {t!r} names axes of different sizes "
                                               f"{sorted(dims)} in an operand of shape {_shape(x)}"))
        for c, s in zip(t, _shape(x)):
            # a size-1 axis broadcasts against any other size, a zero-size one included (as NumPy)
            if c not in sizes or sizes[c] == 1:
                sizes[c] = s
            elif s not in (1, sizes[c]):
                raise ShapeError(with_location(f"einsum: operands disagree on the size of {c!r} ({sizes[c]} and {s})"))
    if any(c not in sizes for c in out_labels):
        raise ValueError(with_location(f"einsum: output subscript {out_labels!r} names a label no operand has"))
    current = [_diagonal_labels(x, t) for x, t in zip(arrays, ins)]
    if len(current) > 2 and optimize is not False:
        how = optimize if isinstance(optimize, (str, list)) else "greedy"
        dummies = [np.broadcast_to(np.zeros((), np.float64), tuple(sizes[c] for c in t)) for _, t in current]
        path = np.einsum_path(",".join(t for _, t in current) + "->" + out_labels, *dummies, optimize=how)[0][1:]
    else:
        path = [tuple(range(len(current)))] if len(current) > 1 else []
    for step in path:
        picked = [current[i] for i in step]
        current = [c for i, c in enumerate(current) if i not in step]
        keep = set(out_labels) | set("".join(t for _, t in current))
        x, lx = picked[0]
        if len(picked) == 1:
            x, lx = _sum_out(x, lx, keep)
        for k in range(1, len(picked)):
            y, ly = picked[k]
            rest = set("".join(t for _, t in picked[k + 1:]))
            x, lx = _pair(x, lx, y, ly, keep | rest, sizes)
        current.append((x, lx))
    (x, lx), = current
    x, lx = _sum_out(x, lx, set(out_labels))
    x = transpose(x, [lx.index(c) for c in out_labels]) if lx != out_labels else x
    return broadcast_to(x, tuple(sizes[c] for c in out_labels))
