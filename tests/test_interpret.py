"""backends/interpret.py, the NumPy oracle: it runs a graph equation by equation, checks every
result against the IR, frees intermediates after their last use, and runs control flow."""
import numpy as np
import pytest

import tracekern as tk
from tracekern.backends.interpret import compile_graph


def test_runs_a_graph_and_reports_its_planned_peak():
    g = tk.make_ir(lambda x: np.sum(np.exp(x) * np.sin(x)))(np.ones(1000))
    run = compile_graph(g)
    x = np.linspace(0, 1, 1000)
    np.testing.assert_allclose(run([x])[0], np.sum(np.exp(x) * np.sin(x)))
    assert run.source is None
    assert run.peak_bytes == 3 * 8000   # exp, sin and their product alive together; then both freed, and the sum


def test_checks_impl_results_against_the_ir(monkeypatch):
    from tracekern.primitives import sin

    monkeypatch.setattr(type(sin), "impl", lambda self, x: np.sin(x).astype(np.float32))
    with pytest.raises(tk.IRError, match="sin produced float32"):
        tk.jit(np.sin, backend="interpret")(np.ones(3))


def test_runs_control_flow_and_annotations_through_their_sub_graphs(capfd):
    def f(x):
        y = tk.cond(np.sum(x) > 0, lambda v: v * 2, lambda v: -v, x)
        c, ys = tk.scan(lambda c, r: (c + r, c.sum()), x, np.stack([x, x]))
        n = tk.while_loop(lambda s: s[0] < 10.0, lambda s: (s[0] * 2, s[1] + 1), (np.sum(np.abs(x)) + 1, np.int64(0)))[1]
        tk.print("n", n)
        return y, c, ys, n

    x = np.array([0.5, -0.25])
    y, c, ys, n = tk.jit(f, backend="interpret")(x)
    np.testing.assert_allclose(y, x * 2)
    np.testing.assert_allclose(c, 3 * x)
    np.testing.assert_allclose(ys, [x.sum(), 2 * x.sum()])
    assert n == 3
    assert capfd.readouterr().out == "n 3\n"
