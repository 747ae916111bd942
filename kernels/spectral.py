"""Wave packets through a smooth barrier: the nonlinear Schrodinger equation
i psi_t = -psi_xx / 2 + V(x) psi + g |psi|^2 psi on a periodic grid, solved by the split-step Fourier
method (complex64: a half step of the kinetic term in Fourier space, np.fft.fft / ifft, then the
potential's and the nonlinearity's phase, np.exp(-1j ...), then another half kinetic step) for `steps`
steps with tk.scan. The barrier is V(x) = h (erf((x + a) / s) - erf((x - a) / s)) / 2 (scipy.special.erf).
The loss is the mean squared difference between the final density |psi|^2 and an observed one,
differentiated with respect to the parameters (h, a, g): fit() recovers them from a density by
gradient descent. It exists to run complex numbers, np.fft and scipy.special in one real program.
Strategies: keep every step's state, or checkpoint=k (binomial checkpointing of the scan).

loss() takes the namespaces it runs with (xp, erf, scan), so kernels/peers runs this same code with
jax.numpy, jax.scipy.special.erf and lax.scan."""
import numpy as np

import tracekern as tk

NAME = "spectral"
STRATEGIES = ("none", "checkpoint8")
SIZES = {"full": (64, 1024, 200), "quick": (16, 512, 100), "test": (2, 64, 50)}   # packets, grid points, steps
LENGTH = 40.0        # the periodic domain [-20, 20)
DT = 0.05
EDGE = 0.5           # the barrier's edge width s
TRUE = np.array([2.0, 1.5, 0.5], np.float32)   # (h, a, g) of the observed density


def checkpoints(strategy: str):
    return None if strategy == "none" else int(strategy.removeprefix("checkpoint"))


def _scan(step, psi, steps, checkpoint):
    return tk.scan(lambda p, _: (step(p), None), psi, None, length=steps, checkpoint=checkpoint)[0]


def evolve(params, psi0, x, steps, checkpoint=None, xp=np, erf=None, scan=_scan):
    """psi after `steps` split steps, from psi0 (packets, points) on the grid x; erf: scipy.special.erf unless given
    (imported here: SciPy's special functions take 0.1 s to import, in every benchmark process that imports kernels/)."""
    if erf is None:
        import scipy.special

        erf = scipy.special.erf
    h, a, g = params[0], params[1], params[2]
    n = x.shape[-1]
    k = 2 * np.pi * np.fft.fftfreq(n, LENGTH / n)
    cdtype = np.result_type(params.dtype, np.complex64)                       # (complex64 for float32 parameters)
    half_kinetic = np.exp(-0.25j * DT * k * k).astype(cdtype)                 # exp(-i k^2/2 dt/2), a constant
    psi0 = psi0.astype(cdtype)
    barrier = h * (erf((x + a) * np.float32(1 / EDGE)) - erf((x - a) * np.float32(1 / EDGE))) * np.float32(0.5)

    def step(psi):
        psi = xp.fft.ifft(xp.fft.fft(psi) * half_kinetic)
        density = psi.real * psi.real + psi.imag * psi.imag
        psi = psi * xp.exp(-1j * np.float32(DT) * (barrier + g * density))
        return xp.fft.ifft(xp.fft.fft(psi) * half_kinetic)
    return scan(step, psi0, steps, checkpoint)


def loss(params, psi0, x, target, steps, checkpoint=None, **namespaces):
    psi = evolve(params, psi0, x, steps, checkpoint, **namespaces)
    xp = namespaces.get("xp", np)
    return xp.mean((xp.abs(psi) ** 2 - target) ** 2) * np.float32(100)


def inputs(packets: int, points: int, steps: int):
    """(initial parameters, packets, grid, the density the true parameters give)."""
    x = (np.arange(points) * (LENGTH / points) - LENGTH / 2).astype(np.float32)
    rng = np.random.default_rng(0)
    start = rng.uniform(-7, -4, (packets, 1))
    speed = rng.uniform(2.0, 3.0, (packets, 1))
    psi0 = (np.exp(-(x - start) ** 2 / 2) * np.exp(1j * speed * x) / np.pi ** 0.25).astype(np.complex64)
    target = np.abs(tk.jit(lambda p: evolve(p, psi0, x, steps), backend="interpret")(TRUE)) ** 2
    params = np.array([1.0, 1.0, 0.2], np.float32)
    return params, psi0, x, target.astype(np.float32)


def make(size: str, strategy: str):
    packets, points, steps = SIZES[size]
    k = checkpoints(strategy)
    return (lambda params, psi0, x, target: loss(params, psi0, x, target, steps, k)), inputs(packets, points, steps)


def fit(size: str = "test", iterations: int = 60, rate: float = 0.1, backend: str = "cpu"):
    """Gradient descent on the parameters (Adam's normalised steps): (parameters, losses)."""
    loss_fn, (params, psi0, x, target) = make(size, "none")
    step = tk.jit(tk.value_and_grad(loss_fn), backend=backend)
    m, v, losses = np.zeros(3, np.float32), np.zeros(3, np.float32), []
    for t in range(1, iterations + 1):
        value, grad = step(params, psi0, x, target)
        losses.append(float(value))
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        params = (params - rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)).astype(np.float32)
    return params, losses
