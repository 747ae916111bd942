"""tk.jacfwd, tk.jacrev and tk.hessian (SPEC section 10): whole Jacobians from the transforms below
them, as one program each: jacfwd is tk.vmap of tk.jvp over the input's basis, jacrev tk.vmap of
tk.vjp's pullback over the output's basis, hessian jacfwd of jacrev.

Shapes are out.shape + in.shape for each (output leaf, input leaf); the result has the output's
pytree structure outside and the differentiated arguments' inside (a tuple of them for a tuple
argnums), as JAX's. Called on arrays they compile like tk.jit; inside a trace they emit there."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import numpy as tnp
from .api import jvp, vjp
from .arguments import arg_name, flatten_call, fun_name
from .errors import with_location
from .ir import is_complex, is_float
from .primitives import iota
from .pytree import Static, call_static, tree_flatten, tree_unflatten
from .staging import Staged
from .trace import _read, bind
from .vectorize import vmap


def _argnums(name: str, fun: Callable, argnums, args: tuple) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -len(args) <= i < len(args):
            raise ValueError(with_location(f"{name} of {fun_name(fun)}: argnums={argnums} but it was called with "
                                           f"{len(args)} positional arguments"))
        if type(args[i]) is Static:
            raise ValueError(with_location(f"{name} of {fun_name(fun)}: argnums={argnums} names a static argument "
                                           "(tk.jit's static_argnums), which has no derivative"))
    return tuple(i % len(args) for i in nums)


def _check_float(name: str, fun: Callable, flat, k: int, argnum: int) -> None:
    """The leaves of flat's k-th differentiated argument, fun's positional argument `argnum`, are float."""
    for aval, owner in zip(flat.avals, flat.owner):
        if owner == k and is_complex(aval.dtype):
            raise TypeError(with_location(
                f"{name} of {fun_name(fun)}: {arg_name(fun, argnum)} has a leaf of dtype {aval.dtype}; Jacobians are taken "
                "with respect to float32/float64 values only (tracekern has no holomorphic=, which JAX asks for here). "
                "Pass the real and imaginary parts as two float arguments, or use tk.jvp (complex tangents) or "
                "tk.grad(..., holomorphic=True) for a complex scalar output"))
        if owner == k and not is_float(aval.dtype):
            raise TypeError(with_location(
                f"{name} of {fun_name(fun)}: {arg_name(fun, argnum)} has a leaf of dtype {aval.dtype}; derivatives are taken "
                "with respect to float32/float64 values only (leave integer arguments out of argnums, or .astype(float))"))


def _partial(fun: Callable, args: tuple, nums: tuple[int, ...]) -> Callable:
    """fun as a function of the arguments in `nums` only, the others fixed (closed over)."""
    def part(*diff):
        full = list(args)
        for i, d in zip(nums, diff):
            full[i] = d
        return call_static(fun, tuple(full))

    part.__name__ = part.__qualname__ = fun_name(fun)
    return part


def _basis(sizes: Sequence[int], dtype_of: Sequence[np.dtype]) -> list:
    """The rows of the identity of order sum(sizes), split into blocks of columns: block k is
    (n, sizes[k]) in dtype_of[k]. Each is emitted as a comparison of two iotas (row == column +
    offset), not a dense constant: kernels compute a one-hot entry from their loop indices, where
    an n x n constant was an array every kernel reading a column of it was passed."""
    n = int(sum(sizes))
    rows = bind(iota, shape=(n, 1))
    out, start = [], 0
    for s, dt in zip(sizes, dtype_of):
        out.append(tnp.equal(rows, bind(iota, shape=(1, s)) + start).astype(dt))
        start += s
    return out


def _blocks(stacked, sizes: Sequence[int], shapes: Sequence[tuple]) -> list:
    """A (n, *rest) value cut along axis 0 into blocks of sizes[k] rows, each reshaped to shapes[k] + rest."""
    out, start = [], 0
    rest = tuple(stacked.shape[1:])
    for s, shape in zip(sizes, shapes):
        out.append(tnp.reshape(stacked[start:start + s], tuple(shape) + rest))
        start += s
    return out


def _move_front_to_back(x, k: int):
    """(k axes, *rest) -> (*rest, k axes)."""
    nd = len(x.shape)
    return tnp.transpose(x, tuple(range(k, nd)) + tuple(range(k)))


def _assemble(out_td, in_tds, nums_is_int: bool, per_out: list) -> Any:
    """per_out[j][i] is a list of leaf Jacobians (output leaf j, argument i's leaves): the result
    with the output's structure outside and the arguments' inside."""
    jac = []
    for by_arg in per_out:
        trees = [tree_unflatten(td, leaves) for td, leaves in zip(in_tds, by_arg)]
        jac.append(trees[0] if nums_is_int else tuple(trees))
    return tree_unflatten(out_td, jac)


def _differentiated(name: str, fun: Callable, argnums, args: tuple):
    """(fun of the arguments in argnums only, those arguments, their flattening), float ones checked."""
    nums = _argnums(name, fun, argnums, args)
    primals = tuple(args[i] for i in nums)
    flat = flatten_call(fun, primals)
    for k in range(len(nums)):
        _check_float(name, fun, flat, k, nums[k])
    return _partial(fun, args, nums), primals, flat


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False) -> Staged:
    """The Jacobian of fun by forward mode: tk.vmap of tk.jvp over the basis of the inputs in argnums
    (one JVP per input entry, all in one batched program). Best when inputs are fewer than outputs.
    Each leaf's Jacobian has shape out.shape + in.shape. has_aux: fun returns (out, aux), and
    jacfwd (jacobian, aux)."""
    return _jacfwd(fun, argnums, has_aux, "tk.jacfwd")


def _jacfwd(fun: Callable, argnums, has_aux: bool, name: str) -> Staged:
    """jacfwd, its errors naming the transform the user called (`name`)."""

    def emit(*args):
        part, primals, flat = _differentiated(name, fun, argnums, args)
        avals = list(flat.avals)
        sizes = [a.size for a in avals]
        primal_leaves = [_read(x) for x in flat.leaves]
        if sum(sizes) == 0:   # no input entries, no lanes: every Jacobian is empty, as JAX's
            res = part(*flat.unflatten(primal_leaves))
            out, aux = res if has_aux else (res, None)
            out_leaves, out_td = tree_flatten(out)
            per_out = [_by_argument([tnp.zeros(_shape(o) + tuple(a.shape), _dtype(o)) for a in avals], flat)
                       for o in out_leaves]
            jac = _assemble(out_td, flat.treedefs, isinstance(argnums, int), per_out)
            return (jac, aux) if has_aux else jac
        basis = _basis(sizes, [a.dtype for a in avals])

        def push(*columns):   # one JVP, along one basis direction (a lane of the vmap)
            tans = [tnp.reshape(c, a.shape) for c, a in zip(columns, avals)]
            res = jvp(part, tuple(flat.unflatten(primal_leaves)), tuple(flat.unflatten(tans)), has_aux=has_aux)
            return (res[1], res[2]) if has_aux else res[1]

        # (n, *out leaf shape) per output leaf; aux is the same in every lane, returned once
        stacked = vmap(push, out_axes=(0, None) if has_aux else 0)(*basis)
        stacked, aux = stacked if has_aux else (stacked, None)
        out_leaves, out_td = tree_flatten(stacked)
        per_out = []
        for t in out_leaves:
            cols = _blocks(t, sizes, [a.shape for a in avals])       # (in shape..., out shape...)
            leaf_jacs = [_move_front_to_back(c, len(a.shape)) for c, a in zip(cols, avals)]
            per_out.append(_by_argument(leaf_jacs, flat))
        jac = _assemble(out_td, flat.treedefs, isinstance(argnums, int), per_out)
        return (jac, aux) if has_aux else jac

    return _staged(fun, emit)


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False) -> Staged:
    """The Jacobian of fun by reverse mode: one forward pass (tk.vjp), then tk.vmap of its pullback
    over the basis of the outputs (one VJP per output entry, all in one batched program). Best when
    outputs are fewer than inputs. Shapes out.shape + in.shape; has_aux as for jacfwd."""
    return _jacrev(fun, argnums, has_aux, "tk.jacrev")


def _jacrev(fun: Callable, argnums, has_aux: bool, name: str) -> Staged:
    """jacrev, its errors naming the transform the user called (`name`)."""

    def emit(*args):
        part, primals, flat = _differentiated(name, fun, argnums, args)
        res = vjp(part, *primals, has_aux=has_aux)
        out, pullback = res[0], res[1]
        out_leaves, out_td = tree_flatten(out)
        out_leaves = [_read(o) for o in out_leaves]
        for o in out_leaves:
            if is_complex(np.dtype(o.dtype)):
                raise TypeError(with_location(
                    f"{name} of {fun_name(fun)}: an output of dtype {o.dtype}; reverse-mode Jacobians are of float "
                    "outputs only (JAX's jacrev raises here too, without holomorphic=). Use tk.jacfwd (a complex output "
                    "of float inputs: its columns are the JVPs), or return np.real(out) and np.imag(out)"))
            if not is_float(np.dtype(o.dtype)):
                raise TypeError(with_location(f"{name} of {fun_name(fun)}: an output of dtype {o.dtype} has no "
                                              "derivative; return float values (or use tk.jacfwd, which gives zeros)"))
        sizes = [int(np.prod(o.shape, dtype=np.int64)) for o in out_leaves]
        shapes = [tuple(o.shape) for o in out_leaves]
        if sum(sizes) == 0:   # no output entries, no lanes: every Jacobian is empty, as JAX's
            per_out = [_by_argument([tnp.zeros(shape + tuple(a.shape), a.dtype) for a in flat.avals], flat)
                       for shape in shapes]
            jac = _assemble(out_td, flat.treedefs, isinstance(argnums, int), per_out)
            return (jac, res[2]) if has_aux else jac
        basis = _basis(sizes, [np.dtype(o.dtype) for o in out_leaves])

        def pull(*rows):   # one VJP, along one basis cotangent (a lane of the vmap)
            cts = [tnp.reshape(r, s) for r, s in zip(rows, shapes)]
            return pullback(tree_unflatten(out_td, cts))

        stacked = vmap(pull)(*basis)          # per argument: a tree of (m, *in leaf shape)
        rows_per_leaf = [_read(x) for x in tree_flatten(stacked)[0]]
        in_avals = list(flat.avals)
        per_out = []
        for j in range(len(out_leaves)):
            leaf_jacs = []
            for x, a in zip(rows_per_leaf, in_avals):
                block = _blocks(x, sizes, shapes)[j]                   # (out shape..., in shape...)
                leaf_jacs.append(tnp.reshape(block, shapes[j] + tuple(a.shape)))
            per_out.append(_by_argument(leaf_jacs, flat))
        jac = _assemble(out_td, flat.treedefs, isinstance(argnums, int), per_out)
        return (jac, res[2]) if has_aux else jac

    return _staged(fun, emit)


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False) -> Staged:
    """The Hessian of a scalar-valued fun: tk.jacfwd of tk.jacrev (forward over reverse). Shape
    in.shape + in.shape per pair of leaves, nested as JAX's."""
    return _jacfwd(_jacrev(fun, argnums, has_aux, "tk.hessian"), argnums, has_aux, "tk.hessian")


def _shape(x) -> tuple:
    return tuple(np.shape(_read(x)))


def _dtype(x) -> np.dtype:
    x = _read(x)
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _by_argument(leaf_jacs: list, flat) -> list[list]:
    """Leaf Jacobians (one per differentiated leaf, in order) grouped by the argument they belong to."""
    groups: list[list] = [[] for _ in flat.treedefs]
    for jac, owner in zip(leaf_jacs, flat.owner):
        groups[owner].append(jac)
    return groups


def _staged(fun: Callable, emit: Callable) -> Staged:
    emit.takes_static = True

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):   # (what transforms of the Jacobian function trace)
        return emit(*args, **kwargs)

    return Staged(wrapped, emit)

