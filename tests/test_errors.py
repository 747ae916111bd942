"""Bad input gets a clear error at trace time, naming the user's file and line and what to do."""
import numpy as np
import pytest

import tracekern as tk

THIS_FILE = __file__


def _line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def test_python_if_on_tracer_raises_tracer_bool_error_with_line():
    def f(x):
        if x.sum() > 0:  # the offending line
            return x
        return -x

    with pytest.raises(tk.TracerBoolError) as info:
        tk.jit(f)(np.ones(3))
    msg = str(info.value)
    assert isinstance(info.value, TypeError)
    assert f"{THIS_FILE}:{_line_of(f, 'the offending line')}" in msg
    assert "np.where" in msg and "bool[]" in msg


@pytest.mark.parametrize("conv", [int, float, bool])
def test_concrete_conversions_raise(conv):
    with pytest.raises(tk.TracerBoolError):
        tk.jit(lambda x: conv(x.sum()))(np.ones(2))


def test_np_asarray_of_tracer_raises():
    with pytest.raises(TypeError, match="cannot be converted to a NumPy array"):
        tk.jit(lambda x: np.asarray(x))(np.ones(2))


@pytest.mark.parametrize("call", ["transpose", "reshape", "diag", "flip"])
def test_a_list_of_traced_values_names_the_numpy_function_and_np_stack(call):
    """np.transpose([a, b]) of traced rows: NumPy dispatches on the arrays passed directly, so it converts the list
    itself; the error said np.asarray / np.array, which the user never wrote. It names the call and np.stack."""
    fns = {"transpose": lambda x: np.transpose([x[0], x[1]]),  # list here
           "reshape": lambda x: np.reshape([x[0], x[1]], -1),  # list here
           "diag": lambda x: np.diag([x[0, 0], x[1, 1]]),  # list here
           "flip": lambda x: np.flip([x[0], x[1]], 0)}  # list here
    with pytest.raises(TypeError) as info:
        tk.jit(fns[call], backend="interpret")(np.ones((2, 3)))
    msg = str(info.value)
    assert f"np.{call} converts a traced array" in msg and f"np.{call}(np.stack([a, b])" in msg, msg
    assert f"{THIS_FILE}:{_line_of(fns[call], 'list here')}" in msg


def test_a_numpy_function_without_dispatch_says_so():
    """np.require(x) of a traced x: NumPy converts it without dispatching; the error named np.asarray / np.array."""
    def f(x):
        return np.require(x, requirements="F")  # require here

    with pytest.raises(TypeError) as info:
        tk.jit(f, backend="interpret")(np.ones((2, 3)))
    msg = str(info.value)
    assert "np.require converts its arguments" in msg and "does not dispatch" in msg, msg
    assert f"{THIS_FILE}:{_line_of(f, 'require here')}" in msg


@pytest.mark.parametrize("dtype", [None, np.float32])
def test_np_full_of_a_traced_value_names_np_full_and_what_to_write(dtype):
    """np.full(shape, traced) converts (or, with dtype=, copies) its fill value before any dispatch: the error said
    np.asarray, or that np.copyto writes in place, neither of which the user wrote."""
    def f(x):
        return np.full((2, 3), x[0], dtype=dtype)  # full here

    with pytest.raises(TypeError) as info:
        tk.jit(f, backend="interpret")(np.ones(2))
    msg = str(info.value)
    assert "np.full(shape, fill_value)" in msg and "np.broadcast_to(value, shape)" in msg and "copyto" not in msg
    assert f"{THIS_FILE}:{_line_of(f, 'full here')}" in msg
    y = tk.jit(lambda x: np.full((2, 3), x[0], like=x[0]), backend="interpret")(np.ones(2))   # (the advice works)
    assert y.shape == (2, 3)


def test_matmul_shape_mismatch_names_both_shapes_and_line():
    def f(a, b):
        return a @ b  # matmul here

    with pytest.raises(ValueError) as info:
        tk.jit(f)(np.ones((3, 4)), np.ones((5, 6)))
    msg = str(info.value)
    assert isinstance(info.value, tk.ShapeError)
    assert "(3, 4)" in msg and "(5, 6)" in msg
    assert f"{THIS_FILE}:{_line_of(f, 'matmul here')}" in msg
    assert "Transpose" in msg


def test_broadcast_mismatch_names_both_shapes_and_line():
    def f(a, b):
        return a + b  # broadcast here

    with pytest.raises(ValueError) as info:
        tk.jit(f)(np.ones(3), np.ones(4))
    msg = str(info.value)
    assert "(3,)" in msg and "(4,)" in msg and f":{_line_of(f, 'broadcast here')}" in msg


@pytest.mark.parametrize("fn,pattern", [
    (lambda x: x.reshape(5), r"reshape.*\(2, 3\) \(size 6\).*\(5,\)"),
    (lambda x: np.squeeze(x, axis=0), "size is not 1"),
    (lambda x: x.sum(axis=2), "out of bounds"),
    (lambda x: np.concatenate([x, x.T]), r"shapes \(2, 3\), \(3, 2\)"),
    (lambda x: np.broadcast_to(x, (3, 3)), "cannot broadcast"),
    (lambda x: x[5], "out of bounds"),
    (lambda x: x[0, 0, 0], "too many indices"),
    (lambda x: np.stack([x, x[0]]), "same shape"),
    (lambda x: x[:, :0].max(axis=1), "no identity"),
])
def test_shape_errors(fn, pattern):
    with pytest.raises((ValueError, IndexError), match=pattern):
        tk.jit(fn)(np.ones((2, 3)))


def test_non_array_argument_raises_type_error_naming_it():
    def f(x, label):
        return x

    with pytest.raises(TypeError, match=r"argument 1 \('label'\).*str"):
        tk.jit(f)(np.ones(2), "hello")
    with pytest.raises(TypeError, match=r"argument 0 \('params'\) at \['w'\].*object"):
        tk.jit(lambda params: params["w"])({"w": object()})


def test_unsupported_dtype_argument():
    with pytest.raises(TypeError, match="float16.*supported dtypes"):
        tk.jit(lambda x: x)(np.ones(2, np.float16))


def test_unsupported_numpy_function_names_it_and_the_alternative():
    with pytest.raises(NotImplementedError) as info:
        tk.jit(lambda x: np.unique(x))(np.ones(3))
    msg = str(info.value)
    assert "np.unique" in msg and "depends on the data" in msg and "np.sort" in msg and "sigmoid" in msg
    assert "What can be traced" in msg and THIS_FILE in msg
    with pytest.raises(NotImplementedError, match=r"np.linalg.lstsq is not supported.*np.linalg.pinv"):
        tk.jit(lambda x: np.linalg.lstsq(x, x))(np.eye(2))
    with pytest.raises(NotImplementedError, match=r"np.einsum_path is not supported.*the closest supported: np.einsum"):
        tk.jit(lambda x: np.einsum_path("ij,jk", x, x))(np.ones((2, 2)))


def test_unsupported_ufunc_names_it():
    with pytest.raises(NotImplementedError, match="np.bitwise_count is not supported.*ufunc.*np.bitwise_and"):
        tk.jit(np.bitwise_count)(np.ones(3, np.int64))


def test_data_dependent_shapes_are_rejected_with_advice():
    with pytest.raises(IndexError, match="traced boolean mask.*data-dependent shape.*np.where.*tk.at"):
        tk.jit(lambda x: x[x > 0])(np.ones(3))
    with pytest.raises(TypeError, match="np.compress with a traced condition"):
        tk.jit(lambda x: np.compress(x > 0, x))(np.ones(3))
    with pytest.raises(TypeError, match="tk.at"):
        def assign(x):
            x[0] = 1.0
            return x
        tk.jit(assign)(np.ones(3))
    with pytest.raises(TypeError, match=r"np.add.at writes into its first argument.*tk.at\(x\)\[idx\].add"):
        tk.jit(lambda x: np.add.at(x, [0], 1.0))(np.ones(3))
    with pytest.raises(TypeError, match=r"sorts in place.*np.sort"):
        tk.jit(lambda x: x.sort())(np.ones(3))


def test_constant_indices_out_of_bounds_raise_like_numpy():
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 3"):
        tk.jit(lambda x: x[np.array([0, 5])])(np.ones(3))
    with pytest.raises(IndexError, match="out of bounds"):
        tk.jit(lambda x: np.take(x, [7]))(np.ones(3))


def test_augmented_item_assignment_names_numpys_semantics():
    """x[idx] += v on a traced array: NumPy's adds once at a repeated index, which is tk.at(x)[idx].set(x[idx] + v);
    the error pointed only to .add, which accumulates repeated indices (np.add.at): another result."""
    def f(x):
        x[np.array([0, 0])] += 1.0
        return x
    with pytest.raises(TypeError, match=r"x\[idx\] \+= v.*tk.at\(x\)\[idx\].set\(x\[idx\] \+ v\).*accumulates") as info:
        tk.jit(f)(np.ones(3))
    assert THIS_FILE in str(info.value)


def test_too_many_indices_in_tk_at_is_numpys_index_error():
    """tk.at(x)[:, :, i] of a 2-D x raised 'tuple index out of range' from inside tracekern."""
    with pytest.raises(IndexError, match=r"too many indices: 3 for an array of shape \(3, 5\)") as info:
        tk.jit(lambda x: tk.at(x)[:, :, np.array([0, 1])].multiply(2.0))(np.ones((3, 5)))
    assert THIS_FILE in str(info.value)


def test_out_argument_is_rejected():
    with pytest.raises(TypeError, match="out="):
        tk.jit(lambda x: np.exp(x, out=x))(np.ones(3))


def test_one_argument_where_is_rejected():
    with pytest.raises(NotImplementedError, match="data-dependent"):
        tk.jit(lambda x: np.where(x > 0))(np.ones(3))


def test_leaked_tracer_is_detected():
    leaked = []

    def f(x):
        leaked.append(x)
        return x

    tk.jit(f)(np.ones(2))
    with pytest.raises(tk.TracerLeakError):
        tk.jit(lambda y: y + leaked[0])(np.ones(2))
    with pytest.raises(tk.TracerLeakError):
        leaked[0] + 1


def test_unknown_backends_are_rejected_at_jit_time_and_known_ones_are_accepted():
    with pytest.raises(ValueError, match=r"unknown backend 'gpu'; available: \['cpu', 'cuda', 'interpret'\]"):
        tk.jit(lambda x: x, backend="gpu")
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        tk.vjp(lambda x: x, np.ones(2), backend="gpu")
    assert tk.available_backends() == ["cpu", "cuda", "interpret"]
    assert tk.default_backend() == "cpu"
    for name in tk.available_backends():
        assert tk.jit(lambda x: x * 2, backend=name).lower(np.ones(2)).ir.primitive_counts == {"const": 1, "mul": 1}


def test_grad_of_non_scalar_points_to_vjp():
    with pytest.raises(ValueError, match="tk.vjp"):
        tk.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(ValueError, match="tk.vjp"):
        tk.grad(lambda x: (x.sum(), x.sum()))(np.ones(3))


def test_grad_of_integer_argument_is_a_type_error():
    with pytest.raises(TypeError, match=r"argument 0 \('x'\).*int64.*constants of differentiation"):
        tk.grad(lambda x: (x * 2.0).sum())(np.arange(3))
    with pytest.raises(TypeError, match=r"at \['n'\].*bool"):
        tk.grad(lambda p: (p["x"] * p["n"]).sum())({"x": np.ones(2), "n": np.ones(2, bool)})


def test_grad_of_integer_output_is_a_type_error():
    with pytest.raises(TypeError, match="float scalar"):
        tk.grad(lambda x: (x > 0).sum())(np.ones(3))


def test_bad_argnums():
    with pytest.raises(ValueError, match="argnums"):
        tk.grad(lambda x: x.sum(), argnums=2)(np.ones(3))


def test_errors_in_vjp_rules_are_attributed_to_the_forward_line():
    g = tk.make_ir(lambda x: np.sin(x).sum(), mode="grad")(np.ones(3))
    cos_eqns = [e for e in g.eqns if e.primitive.name == "cos"]
    assert cos_eqns and cos_eqns[0].source.startswith(THIS_FILE)


def test_the_verdict_on_a_frame_is_kept_by_its_own_code_object_and_read_the_marker_each_time():
    """errors._is_internal keeps a verdict per code object: code objects of the same text compare equal
    across files (the one under tracekern's directory is internal, the user's is not), a module that sets
    USER_CODE_MARKER after its first frames ran is the user's from then on, and no module's globals are
    kept alive by the memo."""
    import gc
    import os
    import weakref

    from tracekern import errors

    text = "import sys\n\ndef here():\n    return sys._getframe()\n"
    ours, users = os.path.join(errors._PKG_DIR, "_not_a_module.py"), os.path.abspath("not_the_library.py")
    names: dict = {}
    exec(compile(text, ours, "exec"), names)
    inside = names["here"]
    exec(compile(text, users, "exec"), names)
    outside = names["here"]
    assert inside.__code__ == outside.__code__ and inside.__code__ is not outside.__code__
    for _ in range(2):   # (the second time from the memo)
        assert errors._is_internal(inside()) is True
        assert errors._is_internal(outside()) is False
    names[errors.USER_CODE_MARKER] = True                  # (marked later: the user's own lines)
    assert errors._is_internal(inside()) is False
    del names[errors.USER_CODE_MARKER]
    assert errors._is_internal(inside()) is True

    class Held:
        pass

    module: dict = {"held": Held()}
    exec(compile(text, users.replace(".py", "_2.py"), "exec"), module)
    assert errors._is_internal(module["here"]()) is False
    alive = weakref.ref(module["held"])
    del module
    gc.collect()
    assert alive() is None


def test_round_of_a_traced_scalar_is_numpys():
    """round(x, n) of an element (NumPy: np.round(x, n), a NumPy scalar) raised "type Tracer doesn't define
    __round__ method", without the user's line; round(x) (a Python int) needs the value; arrays have no __round__."""
    x = np.array([2.567, -1.25])
    for backend in ("interpret", "cpu"):
        got = tk.jit(lambda x: round(x[0], 1) + round(x[1], 0), backend=backend)(x)
        assert got.dtype == np.float64 and got == round(x[0], 1) + round(x[1], 0)
    with pytest.raises(tk.TracerBoolError, match="round"):
        tk.jit(lambda x: round(x[0]))(x)
    with pytest.raises(TypeError, match=r"np\.round.*\n.*test_errors.py"):
        tk.jit(lambda x: round(x, 1))(x)


def test_a_scipy_function_behind_a_decorator_is_named_as_called():
    """scipy.linalg.cho_factor is a decorator's `wrapper` closure: the error named "scipy.wrapper"."""
    scipy_linalg = pytest.importorskip("scipy.linalg")

    def f(K):
        return scipy_linalg.cho_factor(K, lower=True)[0]  # cho here

    with pytest.raises(TypeError, match=r"^scipy\.linalg\.cho_factor converts its arguments") as info:
        tk.jit(f)(np.eye(3))
    assert f"{THIS_FILE}:{_line_of(f, 'cho here')}" in str(info.value)


@pytest.mark.parametrize("cast", [np.float32, lambda v: np.asarray(v, dtype=np.float32)])
def test_a_numpy_cast_of_a_traced_value_points_to_astype(cast):
    """np.float32(x) and np.asarray(x, dtype) (a float32 program's casts) were told to use np.stack."""
    with pytest.raises(TypeError, match=r"x\.astype\(dtype\)"):
        tk.jit(lambda x: cast(x[0]) * x)(np.ones(2))
