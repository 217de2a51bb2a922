#!/usr/bin/env python3
"""jax_check.py - JAX with the platform allocator, checked against numpy.

XLA_PYTHON_CLIENT_ALLOCATOR=platform (set here, before jax is imported)
makes XLA allocate and free every device buffer through the driver
(cuMemAlloc/cuMemFree) instead of its own BFC pool, so under
LD_PRELOAD=libfragpool.so fragpool serves each one.  The script runs a
jitted MLP forward pass and its gradient, a jitted reduction and a plain
matmul over many inputs, and compares with numpy in float64.

Prints "CHECK jax OK <n> calls" and exits 0; "CHECK jax FAIL ..." and 1;
"CHECK jax SKIP ..." and 77 when jax or numpy cannot be imported.
"""
import os
import sys
import time

os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] = "platform"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def main():
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
    except Exception as e:  # noqa: BLE001 - any import failure means skip
        print(f"CHECK jax SKIP cannot import jax/numpy: {e!r}")
        return 77
    jax.config.update("jax_default_matmul_precision", "highest")
    backend = jax.default_backend()
    devs = jax.devices()
    print(f"JAX version {jax.__version__} backend {backend} devices {devs}", flush=True)
    if backend != "gpu":
        print(f"CHECK jax FAIL no GPU backend (backend {backend!r})")
        return 1
    t0 = time.perf_counter()
    rng = np.random.default_rng(7)
    failures = []

    def expect(ok, what):
        if not ok and len(failures) < 20:
            failures.append(what)

    @jax.jit
    def mlp(w1, w2, x):
        return jnp.tanh(x @ w1) @ w2

    def loss(w1, w2, x, y):
        return jnp.mean((mlp(w1, w2, x) - y) ** 2)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))

    @jax.jit
    def stats(x):
        return jnp.sum(x * 3.0 + 1.0), jnp.max(x), jnp.cumsum(x)

    def np_mlp(w1, w2, x):
        return np.tanh(x @ w1) @ w2

    calls = 0
    d_in, d_h, d_out = 256, 512, 128
    w1 = rng.standard_normal((d_in, d_h)).astype(np.float32) / 16
    w2 = rng.standard_normal((d_h, d_out)).astype(np.float32) / 16
    dw1, dw2 = jnp.asarray(w1), jnp.asarray(w2)
    for it in range(150):
        n = (64, 256, 1024)[it % 3]
        x = rng.standard_normal((n, d_in)).astype(np.float32)
        y = rng.standard_normal((n, d_out)).astype(np.float32)
        dx, dy = jnp.asarray(x), jnp.asarray(y)
        out = np.asarray(mlp(dw1, dw2, dx))
        want = np_mlp(w1.astype(np.float64), w2.astype(np.float64), x.astype(np.float64))
        expect(np.allclose(out, want, rtol=1e-4, atol=1e-4), f"mlp it {it}")
        g1, g2 = grad(dw1, dw2, dx, dy)
        # gradient of the mean squared error, in float64
        h = np.tanh(x.astype(np.float64) @ w1)
        r = 2.0 * (h @ w2 - y) / (n * d_out)
        want_g2 = h.T @ r
        want_g1 = x.T.astype(np.float64) @ ((r @ w2.T) * (1 - h * h))
        for name, got, want_g in (("w2", g2, want_g2), ("w1", g1, want_g1)):
            scale = float(np.abs(want_g).max()) or 1.0
            expect(np.allclose(np.asarray(got), want_g, rtol=1e-3, atol=1e-4 * scale),
                   f"grad {name} it {it}")
        v = rng.standard_normal(1000 + 37 * (it % 5)).astype(np.float32)
        s, mx, cs = stats(jnp.asarray(v))
        v64 = v.astype(np.float64)
        expect(abs(float(s) - float((v64 * 3 + 1).sum())) <= 1e-3 * max(1.0, abs((v64 * 3 + 1).sum())),
               f"sum it {it}")
        expect(float(mx) == float(v.max()), f"max it {it}")
        expect(np.allclose(np.asarray(cs), np.cumsum(v64), rtol=1e-4, atol=1e-3), f"cumsum it {it}")
        calls += 3
    big = rng.standard_normal((2048, 2048)).astype(np.float32)
    prod = np.asarray(jnp.asarray(big) @ jnp.asarray(big))
    expect(np.allclose(prod, big.astype(np.float64) @ big, rtol=1e-3, atol=1e-2), "2048 matmul")
    calls += 1
    print(f"JAX calls {calls} time {time.perf_counter() - t0:.1f} s", flush=True)
    if failures:
        for f in failures:
            print(f"JAX mismatch: {f}")
        print(f"CHECK jax FAIL {len(failures)} mismatches")
        return 1
    print(f"CHECK jax OK {calls} calls")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - report, never hang
        print(f"CHECK jax FAIL exception: {e!r}")
        sys.exit(1)
