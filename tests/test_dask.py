"""tracekern.dask: data-parallel value_and_grad and forward over chunked dask arrays, with the
threaded scheduler and with a LocalCluster of worker processes on 127.0.0.1 (started and stopped
here), compared with the single-process gradient; a worker killed mid-run; Exported pickling."""
import os
import pickle
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tracekern as tk
from tracekern.backends import cache

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
tkd = pytest.importorskip("tracekern.dask")

RNG = np.random.default_rng(0)


def mlp_loss(params, batch):
    """Mean squared error of a 2-layer tanh MLP; params a dict, batch (x, y)."""
    x, y = batch
    h = np.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"]
    return np.mean((out - y) ** 2)


def mlp_sum_loss(params, batch):
    x, y = batch
    h = np.tanh(x @ params["w1"] + params["b1"])
    return np.sum((h @ params["w2"] - y) ** 2)


def chain_loss(p, x):
    """kernels/chain's 16 elementwise layers on p * x, summed."""
    from kernels.chain import LAYERS, layer

    h = p * x
    for k in range(LAYERS):
        h = layer(h, k)
    return np.sum(h)


def mlp_params(d=8, hidden=16, out=3, dtype=np.float64):
    return {"w1": (RNG.standard_normal((d, hidden)) / np.sqrt(d)).astype(dtype),
            "b1": (RNG.standard_normal(hidden) * 0.1).astype(dtype),
            "w2": (RNG.standard_normal((hidden, out)) / np.sqrt(hidden)).astype(dtype)}


def mlp_data(n=200, d=8, out=3, dtype=np.float64):
    return RNG.standard_normal((n, d)).astype(dtype), RNG.standard_normal((n, out)).astype(dtype)


def assert_tree_close(a, b, rtol=1e-10, atol=1e-12):
    la, ta = tk.tree_flatten(a)
    lb, tb = tk.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def single_process(loss, params, data, backend="cpu"):
    return tk.jit(tk.value_and_grad(loss), backend=backend)(params, data)


# ----------------------------------------------------------------------------- threaded scheduler


@pytest.mark.parametrize("chunks", [50, 64, (10, 90, 100)])
def test_sum_reduce_equals_the_gradient_of_the_full_data_loss(chunks):
    params, (x, y) = mlp_params(), mlp_data()
    data = (da.from_array(x, chunks=(chunks, -1) if isinstance(chunks, int) else (chunks, -1)),
            da.from_array(y, chunks=(chunks, -1) if isinstance(chunks, int) else (chunks, -1)))
    value, grads = tkd.value_and_grad_over(mlp_sum_loss, params, data, reduce="sum", scheduler="threads")
    want_value, want_grads = single_process(mlp_sum_loss, params, (x, y))
    ref_value, ref_grads = single_process(mlp_sum_loss, params, (x, y), backend="interpret")
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    assert_tree_close(grads, want_grads)
    assert_tree_close(grads, ref_grads)
    assert set(grads) == {"w1", "b1", "w2"}


def test_mean_reduce_weights_ragged_chunks_by_their_rows():
    params, (x, y) = mlp_params(), mlp_data(n=170)
    data = (da.from_array(x, chunks=(64, -1)), da.from_array(y, chunks=(64, -1)))   # 64, 64, 42
    value, grads = tkd.value_and_grad_over(mlp_loss, params, data, reduce="mean", scheduler="threads")
    want_value, want_grads = single_process(mlp_loss, params, (x, y))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    assert_tree_close(grads, want_grads)
    # and not the unweighted mean of chunk losses
    chunk_means = np.mean([single_process(mlp_loss, params, (x[i:i + 64], y[i:i + 64]))[0] for i in (0, 64, 128)])
    assert abs(chunk_means - want_value) > 1e-6


def test_central_finite_differences_of_the_distributed_loss():
    params, (x, y) = mlp_params(d=3, hidden=4, out=2), mlp_data(n=40, d=3, out=2)
    data = (da.from_array(x, chunks=(15, -1)), da.from_array(y, chunks=(15, -1)))
    _, grads = tkd.value_and_grad_over(mlp_loss, params, data, reduce="mean", scheduler="threads")
    eps = 1e-6
    for name in params:
        for idx in [(0,), (1,)] if params[name].ndim == 1 else [(0, 0), (1, 1)]:
            up = {k: v.copy() for k, v in params.items()}
            dn = {k: v.copy() for k, v in params.items()}
            up[name][idx] += eps
            dn[name][idx] -= eps
            fd = (tkd.value_and_grad_over(mlp_loss, up, data, reduce="mean")[0]
                  - tkd.value_and_grad_over(mlp_loss, dn, data, reduce="mean")[0]) / (2 * eps)
            np.testing.assert_allclose(grads[name][idx], fd, rtol=1e-5, atol=1e-8)


def test_chain_gradient_float32_and_a_data_axis_chunked_twice_is_rechunked():
    p = np.float32(0.7)
    x = RNG.uniform(-1, 1, (256, 6)).astype(np.float32)
    data = da.from_array(x, chunks=(64, 3))      # other axes chunked too: rechunked to whole rows
    value, grad = tkd.value_and_grad_over(chain_loss, p, data, scheduler="threads")
    want_value, want_grad = single_process(chain_loss, p, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4)
    assert np.asarray(grad).dtype == np.float32


def test_map_over_is_the_forward_on_every_chunk():
    params, (x, _) = mlp_params(), mlp_data(n=130)

    def forward(params, x):
        h = np.tanh(x @ params["w1"] + params["b1"])
        return {"out": h @ params["w2"], "h": h}
    out = tkd.map_over(forward, params, da.from_array(x, chunks=(50, -1)))
    assert isinstance(out["out"], da.Array) and out["out"].chunks[0] == (50, 50, 30)
    got = dask.compute(out, scheduler="threads")[0]
    want = tk.jit(forward, backend="interpret")(params, x)
    assert_tree_close(got, want)


def test_bad_input_gets_a_clear_error():
    params, (x, y) = mlp_params(), mlp_data()
    with pytest.raises(TypeError, match="not a dask array.*from_array"):
        tkd.value_and_grad_over(mlp_loss, params, (x, y))
    with pytest.raises(ValueError, match="leaf 1 has 100 rows, leaf 0 has 200"):
        tkd.value_and_grad_over(mlp_loss, params, (da.from_array(x, chunks=(50, -1)), da.from_array(y[:100], chunks=(50, -1))))
    with pytest.raises(ValueError, match="reduce must be 'sum' or 'mean'"):
        tkd.value_and_grad_over(mlp_loss, params, (da.from_array(x), da.from_array(y)), reduce="max")
    with pytest.raises(ValueError, match="keep the chunk's rows on axis 0"):
        tkd.map_over(mlp_loss, params, (da.from_array(x, chunks=(50, -1)), da.from_array(y, chunks=(50, -1))))


# ----------------------------------------------------------------------------- Exported


def test_an_exported_function_pickles_to_source_and_runs_in_another_process(tmp_path):
    params, (x, y) = mlp_params(), mlp_data(n=32)
    step = tk.jit(tk.value_and_grad(mlp_loss))
    exported = step.export(params, (x, y))
    blob = pickle.dumps(exported)
    assert b"Dispatcher" not in blob and b"CPUDispatcher" not in blob   # no Numba objects travel
    assert exported._entry.run.source.encode()[:200] in blob
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "p.pkl").write_bytes(pickle.dumps(params))
    (tmp_path / "e.pkl").write_bytes(blob)
    script = (
        "import pickle, sys, numpy as np\n"
        f"d = {str(tmp_path)!r}\n"
        "e = pickle.load(open(d + '/e.pkl', 'rb'))\n"
        "v, g = e(pickle.load(open(d + '/p.pkl', 'rb')), (np.load(d + '/x.npy'), np.load(d + '/y.npy')))\n"
        "pickle.dump((v, g), open(d + '/out.pkl', 'wb'))\n")
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    v, g = pickle.loads((tmp_path / "out.pkl").read_bytes())
    want_v, want_g = step(params, (x, y))
    np.testing.assert_allclose(v, want_v, rtol=1e-12)
    assert_tree_close(g, want_g)
    assert list((tmp_path / "cache").glob("tk_*.py"))           # compiled there, from the source
    with pytest.raises(ValueError, match=r"exported for leaf 4 of shape \(32, 3\).*got \(5, 3\)"):
        exported(params, (x, y[:5]))


def test_export_refuses_what_cannot_travel():
    with pytest.raises(ValueError, match="backend='cpu'"):
        tk.jit(mlp_loss, backend="interpret").export(mlp_params(), mlp_data())
    v = tk.Variable(np.ones(3))
    with pytest.raises(ValueError, match="Variables"):
        tk.jit(lambda x: np.sum(x * v)).export(np.ones(3))


# ----------------------------------------------------------------------------- LocalCluster


def _what_ran() -> dict:
    """In a worker: per generated module it ran, (its file is in cache_dir(), which check_dir
    accepts; the file's content has the digest that named the module; the file's mode)."""
    from tracekern.backends import cache

    out = {}
    for digest, mod in cache._MODULES.items():
        path = Path(mod.__file__)
        out[digest] = (path.parent == cache.cache_dir(), cache.check_dir(path.parent) is None,
                       cache.source_digest(path.read_text()) == digest, stat.S_IMODE(path.stat().st_mode))
    return out


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=40)
    client = distributed.Client(cluster)
    try:
        yield cluster, client
    finally:
        client.close()
        cluster.close()


def test_local_cluster_mlp_and_chain_gradients_equal_one_process(cluster):
    _, client = cluster
    params, (x, y) = mlp_params(), mlp_data(n=400)
    data = (da.from_array(x, chunks=(50, -1)), da.from_array(y, chunks=(50, -1)))
    value, grads = tkd.value_and_grad_over(mlp_loss, params, data, reduce="mean", scheduler=client)
    want_value, want_grads = single_process(mlp_loss, params, (x, y))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    assert_tree_close(grads, want_grads)

    p = np.float32(1.3)
    xc = RNG.uniform(-1, 1, 4096).astype(np.float32)
    value, grad = tkd.value_and_grad_over(chain_loss, p, da.from_array(xc, chunks=512), scheduler=client)
    want_value, want_grad = single_process(chain_loss, p, xc)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4)
    # both workers ran chunks, and each imported the generated modules from its own disk cache
    modules = client.run(lambda: sorted(__import__("tracekern.backends.cache", fromlist=["x"])._MODULES))
    assert len(modules) == 2 and all(modules.values())
    # what a worker executes: only the steps this client exported, each the source whose hash names
    # its file, in the worker's checked, private cache directory
    exported = {cache.source_digest(s) for per in tkd._EXPORTED.values() for e in per.values() for s in e._entry.run.modules}
    for worker, ran in client.run(_what_ran).items():
        assert ran and set(ran) <= exported, worker
        assert all(ok == (True, True, True, 0o600) for ok in ran.values()), (worker, ran)


def test_a_worker_killed_mid_run_is_retried_and_the_result_is_still_correct(cluster):
    _, client = cluster
    params, (x, y) = mlp_params(), mlp_data(n=480)

    def slow(block):           # slow data loading: the run is still going when a worker dies
        time.sleep(0.25)
        return block
    data = (da.from_array(x, chunks=(30, -1)).map_blocks(slow), da.from_array(y, chunks=(30, -1)))
    future = client.compute(tkd.value_and_grad_over(mlp_loss, params, data, reduce="mean", compute=False))
    pids = client.run(os.getpid)
    time.sleep(1.0)
    assert not future.done()
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)
    value, grads = future.result(timeout=120)
    want_value, want_grads = single_process(mlp_loss, params, (x, y))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    assert_tree_close(grads, want_grads)
    client.wait_for_workers(2, timeout=60)                     # the nanny restarted it
    assert victim not in client.run(os.getpid).values()


def test_map_over_on_the_cluster(cluster):
    _, client = cluster
    params, (x, _) = mlp_params(), mlp_data(n=100)

    def forward(params, x):
        return np.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
    out = client.compute(tkd.map_over(forward, params, da.from_array(x, chunks=(25, -1)))).result()
    np.testing.assert_allclose(out, tk.jit(forward, backend="interpret")(params, x), rtol=1e-12)
