"""tracekern.primitives.ops: the IR-building functions transform rules use. Each emits into the
builder its operands belong to, passed along explicitly; none reads the ambient trace."""
import numpy as np
import pytest

from tracekern.ir import Aval
from tracekern.primitives import ops
from tracekern.trace import Builder, new_builder

F32 = Aval((3,), np.dtype("float32"))


def test_ops_emit_into_the_operands_builder_with_weak_literals():
    b = Builder()
    x = b.new_input(F32)
    y = ops.sub(1, ops.mul(x, x))
    assert y.builder is b and y.dtype == np.float32 and y.shape == (3,)
    names = [e.primitive.name for e in b.eqns]
    assert names == ["mul", "const", "sub"]     # the literal becomes a constant of x's dtype, where it is used
    const = b.eqns[1].params["value"]
    assert const.dtype == np.float32 and const.shape == () and const == 1
    assert not hasattr(y, "__add__") and not hasattr(y, "__array_ufunc__")   # values have no operators


def test_ops_never_touch_the_ambient_trace():
    with new_builder() as ambient:
        b = Builder()
        x = b.new_input(F32)
        ops.exp(x)
        assert ambient.eqns == [] and [e.primitive.name for e in b.eqns] == ["exp"]


def test_every_registered_primitive_is_an_op_and_names_are_checked():
    b = Builder()
    x = b.new_input(F32)
    assert ops.cosh(x).aval == F32                      # any primitive of the table, by name
    assert ops.logical_and(ops.gt(x, 0), ops.lt(x, 1)).dtype == np.bool_   # (aliases for keywords)
    with pytest.raises(AttributeError, match="no op 'no_such_op'"):
        ops.no_such_op(None)
    with pytest.raises(TypeError, match="no operand is a value being built"):
        ops.add(np.ones(3), 1.0)


def test_composites():
    b = Builder()
    x = b.new_input(Aval((2, 3, 4), np.dtype("float64")))
    assert ops.unbroadcast(x, (2, 3, 4)) is x
    u = ops.unbroadcast(x, (3, 1))                     # summed over the added axis and the stretched one
    assert u.shape == (3, 1) and [e.primitive.name for e in b.eqns] == ["reduce_sum", "reshape"]
    assert b.eqns[0].params["axes"] == (0, 2)
    assert ops.unbroadcast(x, (4,)).shape == (4,) and b.eqns[-1].params["axes"] == (0, 1)   # (no reshape needed)
    z = ops.zeros_like(x)
    assert b.eqns[-1].params == {"shape": (2, 3, 4), "dtype": np.dtype("float64"), "value": 0.0}
    assert z.shape == x.shape
    e = ops.expand(ops.reduce_sum(x, axes=(2,)), x.shape, (2,))
    assert e.shape == x.shape and b.eqns[-2].params["new_shape"] == (2, 3, 1)
    m = b.new_input(Aval((5, 2, 3), np.dtype("float64")))
    assert ops.swap_last(m).shape == (5, 3, 2)
    assert ops.first_element(m).shape == (1,) and b.eqns[-1].params["index"] == ((0, 1, 1),)
