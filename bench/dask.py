"""Scale-out on Dask: throughput of an MLP's value_and_grad over 2**16 samples in 16 chunks, in one
process and on Dask (threads; a LocalCluster of 1 and of 2 worker processes), and the overhead Dask
adds per chunk (the same run with tiny chunks, against a plain loop over them).

    python -m bench.dask [--quick] [--json PATH]

Workers get one Numba thread per Dask thread (NUMBA_NUM_THREADS), so 2 workers use the 2 cores
once each. The data is persisted on the cluster before timing (each chunk lives on a worker, the
way a user's loaded data would); the parameters travel with every call. Times are medians."""
from __future__ import annotations

import os
import sys

from bench.harness import median_time, script
from kernels import mlp


def mlp_loss(params, batch):
    """kernels/mlp.py's loss on one chunk (x, y) of the data."""
    return mlp.loss(params, *batch)


def _loop(params, x, y, rows):
    import tracekern as tk

    step = tk.jit(tk.value_and_grad(mlp_loss))

    def run():
        total, grads = 0.0, None
        for i in range(0, len(x), rows):
            v, g = step(params, (x[i:i + rows], y[i:i + rows]))
            w = len(x[i:i + rows]) / len(x)
            total += v * w
            grads = [gi * w for gi in g] if grads is None else [a + gi * w for a, gi in zip(grads, g)]
        return total, grads
    return run


def run(args) -> dict:
    import dask.array as da
    from distributed import Client, LocalCluster

    import tracekern.dask as tkd

    quick = args.quick
    samples, chunks, width, depth = (1 << 16, 16, 256, 4) if not quick else (1 << 12, 16, 64, 2)
    tiny_rows = 64 if not quick else 16
    runs = 5 if not quick else 3
    params, x, y = mlp.inputs(depth, width, samples)
    rows = samples // chunks
    result = {"samples": samples, "chunks": chunks, "width": width, "depth": depth, "cores": os.cpu_count(),
              "rows": [], "overhead": []}

    def record(label, seconds):
        result["rows"].append({"config": label, "time_s": seconds, "samples_per_s": samples / seconds})
        print(f"  {label:38s} {seconds * 1e3:9.1f} ms  {samples / seconds:12.0f} samples/s", file=sys.stderr)

    print(f"MLP value_and_grad: {samples} samples, {chunks} chunks of {rows}, {depth} x {width}", file=sys.stderr)
    loop_time = median_time(_loop(params, x, y, rows), runs)
    record("one process, loop over chunks", loop_time)
    data = (da.from_array(x, chunks=(rows, -1)), da.from_array(y, chunks=(rows, -1)))
    record("dask threads (2)", median_time(lambda: tkd.value_and_grad_over(mlp_loss, params, data, "mean", scheduler="threads"), runs))
    tiny = (da.from_array(x, chunks=(tiny_rows, -1)), da.from_array(y, chunks=(tiny_rows, -1)))
    n_tiny = samples // tiny_rows
    tiny_loop = median_time(_loop(params, x, y, tiny_rows), runs)
    tiny_threads = median_time(lambda: tkd.value_and_grad_over(mlp_loss, params, tiny, "mean", scheduler="threads"), runs)
    result["overhead"].append({"config": "dask threads", "chunks": n_tiny, "per_chunk_s": (tiny_threads - tiny_loop) / n_tiny})
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None, silence_logs=40, env={"NUMBA_NUM_THREADS": "1"}) as cluster, \
                Client(cluster) as client:
            on_cluster = client.persist(data)
            record(f"LocalCluster, {workers} worker process{'es' if workers > 1 else ''}",
                   median_time(lambda c=client, d=on_cluster: tkd.value_and_grad_over(mlp_loss, params, d, "mean", scheduler=c), runs))
            if workers == 2:
                tiny_c = client.persist(tiny)
                t = median_time(lambda c=client, d=tiny_c: tkd.value_and_grad_over(mlp_loss, params, d, "mean", scheduler=c), runs)
                result["overhead"].append({"config": "LocalCluster, 2 processes", "chunks": n_tiny,
                                           "per_chunk_s": (t - tiny_loop) / n_tiny})
    result["tiny_chunk_rows"] = tiny_rows
    return result


def table(result: dict) -> str:
    lines = [f"MLP value_and_grad over {result['samples']} samples in {result['chunks']} chunks "
             f"({result['depth']} x {result['width']}, float32, {result['cores']} cores)",
             f"{'configuration':38s} {'time ms':>9s} {'samples/s':>12s} {'vs loop':>8s}"]
    base = result["rows"][0]["time_s"]
    for r in result["rows"]:
        lines.append(f"{r['config']:38s} {r['time_s'] * 1e3:9.1f} {r['samples_per_s']:12.0f} {base / r['time_s']:8.2f}")
    lines.append(f"\nDask's overhead per chunk ({result['tiny_chunk_rows']}-row chunks, time beyond a plain loop over them):")
    for o in result["overhead"]:
        lines.append(f"  {o['config']:36s} {o['per_chunk_s'] * 1e3:7.2f} ms per chunk ({o['chunks']} chunks)")
    return "\n".join(lines)


def main(argv=None) -> dict:
    return script("python -m bench.dask", __doc__, run, table, "dask.json", argv)


if __name__ == "__main__":
    main()
