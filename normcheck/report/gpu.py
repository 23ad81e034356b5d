"""The report's GPU section: the built-in kernels' bandwidth on the device beside its copy
bandwidth (``normcheck bench gpu`` prints the same)."""

from __future__ import annotations

import numpy as np

from normcheck import formats

__all__ = ["gpu_bandwidth", "format_gpu"]


def gpu_bandwidth(rows=65536, cols=4096, repeats=20, seed=0, echo=print) -> dict:
    """Bandwidth of every built-in bf16 kernel at rows × cols on the GPU (CUDA events), beside the
    device's measured copy bandwidth (device-to-device memcpy: read + write).  The bytes a
    kernel must move: x (+ residual) read, y (+ h) written, γ/β once."""
    from normcheck import kernels
    from normcheck.backends import get_backend

    be = get_backend("cuda")
    drv = be.drv
    be.activate()
    nbytes = rows * cols * 2
    rng = np.random.default_rng(seed)
    a = drv.mem_alloc(nbytes)
    b = drv.mem_alloc(nbytes)
    start, end = drv.Event(), drv.Event()
    drv.memcpy_dtod(b, a, nbytes)
    start.record()
    for _ in range(repeats):
        drv.memcpy_dtod(b, a, nbytes)
    end.record()
    end.synchronize()
    t_copy = start.time_till(end) / 1e3 / repeats
    copy_bw = 2 * nbytes / t_copy
    echo(f"{be.provenance()['device']}: device copy {copy_bw / 1e9:,.0f} GB/s "
         f"({rows} x {cols} bf16)")
    fmt = formats.BF16
    host = fmt.cast(rng.standard_normal((rows, cols)))
    x = drv.mem_alloc(nbytes)
    drv.memcpy_htod(x, host)
    r = drv.mem_alloc(nbytes)
    drv.memcpy_htod(r, host)
    y = drv.mem_alloc(nbytes)
    h = drv.mem_alloc(nbytes)
    gw = drv.mem_alloc(cols * 2)
    drv.memcpy_htod(gw, fmt.cast(np.ones(cols)))
    out = []
    echo(f"{'kernel':52} {'ms':>8} {'GB/s':>8} {'of copy':>8}")
    for v in kernels.variants(storage="bf16"):
        kern = kernels.compiled(v, be)
        args = ([h, y, x, r] if v.fused else [y, x]) + [gw] + ([gw] if v.has_beta else []) + \
            [np.float32(1e-5), np.int32(rows), np.int32(cols)]
        t = kern.time((rows,), (kernels.BLOCK,), args, repeats=repeats)
        moved = nbytes * (4 if v.fused else 2) + cols * 2 * (2 if v.has_beta else 1)
        row = {"kernel": v.name, "seconds": t, "bytes": moved, "bandwidth": moved / t,
               "fraction_of_copy": moved / t / copy_bw}
        out.append(row)
        echo(f"{v.name:52} {t * 1e3:8.3f} {row['bandwidth'] / 1e9:8,.0f} "
             f"{row['fraction_of_copy']:8.0%}")
    for m in (a, b, x, r, y, h, gw):
        m.free()
    return {"device": be.provenance()["device"], "rows": rows, "cols": cols,
            "copy_bandwidth": copy_bw, "kernels": out}


def format_gpu(g: dict) -> str:
    """The GPU section of the report (markdown)."""
    lines = [f"Device: {g['device']}; {g['rows']} x {g['cols']} bf16; device copy bandwidth "
             f"{g['copy_bandwidth'] / 1e9:,.0f} GB/s (read + write).\n",
             "| kernel | ms | GB/s | of copy |", "|---|---:|---:|---:|"]
    for r in g["kernels"]:
        lines.append(f"| {r['kernel']} | {r['seconds'] * 1e3:.3f} | "
                     f"{r['bandwidth'] / 1e9:,.0f} | {r['fraction_of_copy']:.0%} |")
    return "\n".join(lines) + "\n"
