"""The composites batching rules share (Primitive.batch, tracekern.batching): a batched value has
its batch axis first (axis 0, of the batch size); these move, add and broadcast that axis.

A batching rule gets the operands as values of the builder it emits into and, per operand, whether
it is batched; it returns its outputs and whether each is batched. Everything here emits through
tracekern.primitives.ops, so a rule's IR is ordinary IR."""
from __future__ import annotations

from collections.abc import Sequence

from . import ops


def size_of(args: Sequence, batched: Sequence[bool]) -> int:
    """The batch size: the leading axis of any batched operand."""
    return next(int(a.shape[0]) for a, b in zip(args, batched) if b)


def lane_ndim(x, batched: bool) -> int:
    """The number of axes of one lane of x (x's own when it is not batched)."""
    return len(x.shape) - (1 if batched else 0)


def broadcast(x, size: int):
    """An unbatched value as a batched one: the same value in every lane (a view, not a copy)."""
    return ops.broadcast_to(x, shape=(size,) + tuple(x.shape))


def batched(x, is_batched: bool, size: int):
    """x with a batch axis: itself when it has one, else broadcast to every lane."""
    return x if is_batched else broadcast(x, size)


def all_batched(args: Sequence, batched_flags: Sequence[bool]) -> list:
    """Every operand with a batch axis (unbatched ones broadcast)."""
    size = size_of(args, batched_flags)
    return [batched(a, b, size) for a, b in zip(args, batched_flags)]


def with_lane_ndim(x, ndim: int):
    """A batched x whose lanes have fewer than `ndim` axes, with size-1 axes inserted right after
    the batch axis, so that it broadcasts against lanes of `ndim` axes as NumPy would align them."""
    missing = ndim - (len(x.shape) - 1)
    if missing <= 0:
        return x
    return ops.reshape(x, new_shape=(x.shape[0],) + (1,) * missing + tuple(x.shape[1:]))


def moveaxis(x, source: int, destination: int):
    """np.moveaxis for one axis (non-negative positions); x itself when nothing moves."""
    if source == destination:
        return x
    order = [i for i in range(len(x.shape)) if i != source]
    order.insert(destination, source)
    return ops.transpose(x, perm=tuple(order))


def shift(axes: Sequence[int]) -> tuple[int, ...]:
    """Axis numbers of a lane as axis numbers of the batched value (the batch axis is first)."""
    return tuple(int(a) + 1 for a in axes)


def lane_mask(mask, ndim: int):
    """A batched (size,) bool mask reshaped to broadcast against batched values whose lanes have
    `ndim` axes (select's condition, one choice per lane)."""
    return ops.reshape(mask, new_shape=(mask.shape[0],) + (1,) * ndim) if ndim else mask


def select_lanes(mask, on_true, on_false, true_batched: bool, false_batched: bool):
    """Per lane, on_true where the (size,) mask is set and on_false elsewhere (batched result)."""
    ndim = lane_ndim(on_true, true_batched)
    return ops.select(lane_mask(mask, ndim), on_true, on_false)
