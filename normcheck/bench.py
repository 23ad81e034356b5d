"""Benchmarks: commands that print figures (never timed tests).

* ``normcheck bench oracle``  — oracle rows/s beside numpy's float32 LayerNorm and a per-row
  pure-mpmath LayerNorm.
* ``normcheck bench backend`` — cpu-backend rows/s of a one-block-per-row LayerNorm kernel
  beside numpy's vectorised float32 two-pass LayerNorm (the ratio is how many times slower).
* ``normcheck bench check``   — from one run, per format: the oracle alone, the kernel alone
  and the whole long check (rows generated, run, the exact results, the sound bound, the
  measurement) at D = 4096, for a built-in kernel on the cpu backend and a numpy callable.
* ``normcheck bench bias``    — the rounding-bias rule (normcheck.check.tolerances.BIAS) over
  a long run of sound built-in kernels: each batch judged alone (the false-alarm rate per
  trial), the largest |mean| and z met, and the whole run's mean; beside them a
  round-toward-zero store of the same rows (what the rule must catch).
* ``normcheck bench compile`` — the cost of a framework-including file: ``normcheck check`` of
  the torch-extension example (cuda_src/examples/torch_extension.toml) as a user runs it, first
  on a text never built (preprocessing torch's headers, compiling, linking) and again unchanged
  (the build's manifest: no preprocessing); beside them a file that includes only CUDA's headers.
* ``normcheck bench workers`` — what one worker per user source costs: a fresh worker's start
  (isolated, sandboxed) and a launch in it, against a launch in a worker already running, for
  CUDA C and Triton sources; and a default check of a user file whose worker is new.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from normcheck import formats, oracle

__all__ = ["numpy_layernorm", "numpy_rmsnorm", "oracle_benchmark", "backend_benchmark",
           "cub_benchmark", "check_benchmark", "bias_benchmark", "compile_benchmark",
           "workers_benchmark"]


def _best(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def numpy_layernorm(x, g, b, eps=np.float32(1e-5)):
    """numpy's float32 two-pass LayerNorm of the rows x (the yardstick of the oracle benchmark)."""
    m = x.mean(axis=1, keepdims=True)
    d = x - m
    v = np.mean(d * d, axis=1, keepdims=True)
    return d / np.sqrt(v + eps) * g + b


def numpy_rmsnorm(fmt):
    """A float32 numpy RMSNorm storing to ``fmt`` (the callable of the check benchmark)."""
    f = formats.get(fmt)

    def rmsnorm(x, g, b, eps):  # stored as a kernel stores: float32 rounded once to fmt
        xf = x.astype(np.float32)
        r = 1 / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + np.float32(eps))
        return (xf * r * g.astype(np.float32)).astype(f.dtype)

    return rmsnorm


def check_benchmark(rows=4096, cols=4096, fmts=("fp16", "bf16", "fp32"),
                    targets=("builtin", "numpy"), builtin_rows=None, echo=print) -> list[dict]:
    """Rows/s of the oracle alone, the kernel alone and the whole long check
    (normcheck.check.judge.ForwardJudge.run_long: generation, the kernel, the oracle, the sound bound
    and the compiled measurement, pipelined); the first two on the long run's first eight
    batches (one of each of its families, ForwardJudge.long_batches); RMSNorm, the built-in
    ``rmsnorm_rms_<fmt>[_upcast_square]`` on the cpu backend and :func:`numpy_rmsnorm`.  ``check /
    oracle`` is the issue's figure; ``check / slower`` divides by the slower of the oracle and
    the kernel (what the check could reach were its own work free and the kernel off the CPUs, as
    on a GPU); ``own share`` is the part of the check's time that is neither the oracle's nor the
    kernel's time alone (making rows, the bound, the measurement, and the two sharing the CPUs):
    where the kernel runs on the same CPUs as the oracle, a check whose own work were free would
    run at 1 / (1/oracle + 1/kernel), below half the oracle's rate whenever the kernel is slower
    than the oracle."""
    from normcheck import kernels, launch, norms
    from normcheck.oracle import fast as oracle_fast
    from normcheck.check.engine import Setup
    from normcheck.check.forward import peak_rss_mib
    from normcheck.check.judge import ForwardJudge

    n = norms.get("rmsnorm")
    out = []
    echo(f"long check at D = {cols}: RMSNorm, batches of about 2^20 elements, oracle and "
         f"measurement on {oracle_fast.threads()} threads")
    echo(f"{'target':26} {'rows':>6} {'oracle rows/s':>14} {'kernel rows/s':>14} "
         f"{'check rows/s':>13} {'check/oracle':>13} {'check/slower':>13} {'own share':>10} "
         f"{'peak MiB':>9}")
    for name in fmts:
        fmt = formats.get(name)
        for kind in targets:
            if kind == "builtin":
                v = kernels.get(f"rmsnorm_rms_{name}" + ("" if name == "fp32" else "_upcast_square"))
                target = kernels.target(v, "cpu")
                label, R = v.name, builtin_rows or rows
            else:
                target = launch.CallableTarget(numpy_rmsnorm(name), n, fmt, fmt, "numpy_rmsnorm")
                label, R = f"numpy_rmsnorm ({name})", rows
            j = ForwardJudge(target, Setup(norm=n, fmt=fmt))
            # the long run's own first batches, one of each of its families (their rows cost
            # the oracle differently: an offset row needs more double-double than a gaussian one)
            cases = list(itertools.islice(j.long_batches(R, cols), 8))
            rows_in = sum(c.rows for _, c in cases)
            # the kernel alone on the build the long run uses (the plain one, one guard): the
            # hazard build timed here made the check look faster than the kernel (#64)
            j.reference(cases[0][1])
            j.run_target(*cases[0], guard="end", hazards=False)
            t0 = time.perf_counter()
            for _, c in cases:
                j.reference(c)
            t_or = (time.perf_counter() - t0) / rows_in
            t0 = time.perf_counter()
            for fam, c in cases:
                j.run_target(fam, c, guard="end", hazards=False)
            t_k = (time.perf_counter() - t0) / rows_in
            del cases
            t0 = time.perf_counter()
            fr, fails, _ = j.run_long(R, cols)
            t_all = (time.perf_counter() - t0) / R
            row = {"target": label, "format": name, "rows": R, "cols": cols,
                   "oracle_rows_per_s": 1 / t_or, "kernel_rows_per_s": 1 / t_k,
                   "check_rows_per_s": 1 / t_all, "check_over_oracle": t_or / t_all,
                   "check_over_slower": max(t_or, t_k) / t_all,
                   "own_share": max(0.0, 1 - (t_or + t_k) / t_all), "verdict": fr.verdict,
                   "peak_rss_mib": peak_rss_mib()}
            out.append(row)
            echo(f"{label:26} {R:6d} {row['oracle_rows_per_s']:14,.0f} "
                 f"{row['kernel_rows_per_s']:14,.0f} {row['check_rows_per_s']:13,.0f} "
                 f"{row['check_over_oracle']:12.0%} {row['check_over_slower']:12.0%} "
                 f"{row['own_share']:9.0%} {row['peak_rss_mib']:9.0f}")
    if out:  # the figure, last: the slowest target's check over its oracle
        echo(f"check/oracle: {min(r['check_over_oracle'] for r in out):.2f}")
    return out


def oracle_benchmark(cols=(1024, 4096), fmts=("fp16", "bf16", "fp32"), elements=1 << 21,
                     mp_rows=2, seed=0, echo=print) -> list[dict]:
    """Rows/s of :func:`normcheck.oracle.layernorm` (with γ and β) on gaussian rows, beside
    numpy's float32 LayerNorm of the same rows and a per-row LayerNorm in mpmath at 256 bits
    (:func:`normcheck.oracle.mp_reference`), all from one run."""
    from normcheck.oracle import fast as oracle_fast

    rng = np.random.default_rng(seed)
    out = []
    echo(f"oracle: compiled tiers 1-2 on {oracle_fast.threads()} threads "
         "(NORMCHECK_ORACLE_THREADS); numpy: float32 two-pass, one thread")
    echo(f"{'format':6} {'D':>5} {'oracle rows/s':>14} {'numpy f32 rows/s':>17} "
         f"{'oracle/numpy':>13} {'mpmath rows/s':>14} {'oracle/mpmath':>14} "
         f"{'not settled in float64':>23}")
    for D in cols:
        for name in fmts:
            f = formats.get(name)
            n = max(64, elements // D)
            x = f.cast(rng.standard_normal((n, D)))
            g = f.cast(rng.standard_normal(D))
            b = f.cast(rng.standard_normal(D))
            oracle.layernorm(x[:8], g, b)  # warm up (and build)
            ref = None

            def run():
                nonlocal ref
                ref = oracle.layernorm(x, g, b)

            t_or = _best(run, 5) / n
            x32, g32, b32 = x.astype(np.float32), g.astype(np.float32), b.astype(np.float32)
            numpy_layernorm(x32, g32, b32)
            t_np = _best(lambda: numpy_layernorm(x32, g32, b32), 5) / n
            t_mp = _best(lambda: [oracle.mp_reference(x[i], g, b, prec=256)
                                  for i in range(mp_rows)], 1) / mp_rows
            row = {"format": name, "cols": D, "oracle_rows_per_s": 1 / t_or,
                   "numpy_rows_per_s": 1 / t_np, "oracle_over_numpy": t_np / t_or,
                   "mpmath_rows_per_s": 1 / t_mp, "ratio": t_mp / t_or,
                   "unsettled_fraction": float(ref.slow.mean()),
                   "threads": oracle_fast.threads()}
            out.append(row)
            echo(f"{name:6} {D:5d} {row['oracle_rows_per_s']:14,.0f} "
                 f"{row['numpy_rows_per_s']:17,.0f} {row['oracle_over_numpy']:12.2f}x "
                 f"{row['mpmath_rows_per_s']:14,.1f} {row['ratio']:13,.0f}x "
                 f"{row['unsettled_fraction']:23.2e}")
    return out


def backend_benchmark(cols=(1024, 4096), rows=2048, variant="layernorm_two_pass_fp32",
                      workers=None, seed=0, echo=print) -> list[dict]:
    """Rows/s of a built-in one-block-per-row LayerNorm (256 threads) on the cpu backend, end to
    end (transfer to the worker included) and inside the launch, beside numpy's vectorised
    float32 two-pass LayerNorm on the same rows."""
    import os

    from normcheck import kernels
    from normcheck import launch as launch_mod

    workers = workers or os.cpu_count() or 1
    rng = np.random.default_rng(seed)
    v = kernels.get(variant)
    target = kernels.target(v)  # its spec's ABI (kernels.Variant.spec)
    kern = target.kernels[v.name]
    out = []
    echo(f"{variant} on the cpu backend, {workers} worker threads, block 256; the plain build "
         "(the long runs) and the hazard build (the families: races, shared-memory bounds)")
    echo(f"{'D':>5} {'rows/s':>10} {'in launch':>10} {'hazard':>10} {'of plain':>9} "
         f"{'numpy f32':>10} {'ratio':>7}")
    for D in cols:
        x = rng.standard_normal((rows, D)).astype(np.float32)
        g = np.ones(D, np.float32)
        b = np.zeros(D, np.float32)
        case = launch_mod.Case(x=x, gamma=g, beta=b)
        target(case, workers=workers)  # warm up
        launch = []

        def once():
            target(case, workers=workers)
            launch.append(kern.last_seconds)

        t = _best(once, 3)
        target(case, workers=workers, hazards=True)  # warm up (and build) the hazard build
        hz = []

        def hazard():
            target(case, workers=workers, hazards=True)
            hz.append(kern.last_seconds)

        _best(hazard, 3)

        def np_ln():
            mu = x.mean(axis=1, keepdims=True, dtype=np.float32)
            d = x - mu
            var = (d * d).mean(axis=1, keepdims=True, dtype=np.float32)
            return d / np.sqrt(var + np.float32(1e-5)) * g + b

        t_np = _best(np_ln, 3)
        row = {"cols": D, "rows_per_s": rows / t, "rows_per_s_in_launch": rows / min(launch),
               "hazard_rows_per_s_in_launch": rows / min(hz),
               "numpy_rows_per_s": rows / t_np, "numpy_ratio": t / t_np, "workers": workers}
        row["hazard_of_plain"] = row["hazard_rows_per_s_in_launch"] / row["rows_per_s_in_launch"]
        out.append(row)
        echo(f"{D:5d} {row['rows_per_s']:10,.0f} {row['rows_per_s_in_launch']:10,.0f} "
             f"{row['hazard_rows_per_s_in_launch']:10,.0f} {row['hazard_of_plain']:8.2f}x "
             f"{row['numpy_rows_per_s']:10,.0f} {row['numpy_ratio']:6.1f}x")
    return out


def cub_benchmark(repeats=2, echo=print) -> dict:
    """Wall time of a default ``normcheck check`` of the vLLM-style RMSNorm example written with
    cub::BlockReduce, beside the same kernel with its reduction written with warp shuffles
    (cuda_src/examples/vllm_cub_rms_norm.cu), warm build cache, best of ``repeats``."""
    from normcheck import check, spec as specs
    from normcheck.kernels import CUDA_SRC

    path = CUDA_SRC / "examples" / "vllm_cub_rms_norm.toml"
    times = {}
    for label, entry in (("cub::BlockReduce", "vllm_like::rms_norm_kernel<__nv_bfloat16>"),
                         ("warp shuffles", "vllm_like::rms_norm_kernel_shfl<__nv_bfloat16>")):
        best = float("inf")
        for _ in range(repeats + 1):  # the first run builds
            sp = specs.load(path)
            sp.launches[0].entry = entry
            t = time.perf_counter()
            r = check.check_kernel(None, spec=sp)
            best = min(best, time.perf_counter() - t)
        times[label] = (best, r.verdict, r.rows_checked)
        echo(f"{label:18} {best:6.2f} s  verdict {r.verdict}, {r.rows_checked} rows")
    ratio = times["cub::BlockReduce"][0] / times["warp shuffles"][0]
    echo(f"CUB / shuffles: {ratio:.2f}x")
    return {"seconds": {k: v[0] for k, v in times.items()}, "ratio": ratio}


def bias_benchmark(rows=1_000_000, cols=256, fmts=("fp16", "bf16"), echo=print) -> list[dict]:
    """The rounding-bias rule over ``rows`` rows of the long run's batches (every family of
    ForwardJudge.long_batches in turn) for the sound built-in RMSNorm of each format, and for the
    same outputs re-stored toward zero: batches judged alone, false alarms, the largest |mean|
    signed error and z = |mean|/stderr, and the verdict on the whole run."""
    from normcheck import kernels, measure, norms
    from normcheck.check.engine import Setup
    from normcheck.check.judge import ForwardJudge
    from normcheck.check.tolerances import BIAS

    n = norms.get("rmsnorm")
    out = []
    echo(f"rounding bias over {rows:,} rows of {cols} (the long run's batches; rule: |mean| > "
         f"{BIAS.max_mean} ulp and > {BIAS.z:g} standard errors, at >= {BIAS.min_elements:,} "
         "elements)")
    echo(f"{'store':34} {'batches':>8} {'alarms':>7} {'max |mean|':>11} {'max z':>8} "
         f"{'run mean':>9} {'run z':>8} {'run verdict':>12} {'s':>6}")
    for name in fmts:
        fmt = formats.get(name)
        v = kernels.get(f"rmsnorm_rms_{name}_upcast_square")
        target = kernels.target(v, "cpu")
        j = ForwardJudge(target, Setup(norm=n, fmt=fmt))
        stats = {"rn": [measure.Bias(), 0, 0, 0.0, 0.0], "rz": [measure.Bias(), 0, 0, 0.0, 0.0]}
        t0 = time.perf_counter()
        for fam, case in j.long_batches(rows, cols):
            y = target(case, guard="end")["output"]
            ref = j.reference(case)
            rz = fmt.cast(fmt.round_toward_zero(ref.exact))
            for key, yy in (("rn", y), ("rz", rz)):
                s_, c_ = measure.signed_rows(ref, yy, formats.poison_bits(yy.dtype))
                b = measure.Bias().add(s_, c_)
                st = stats[key]
                st[0].merge(b)
                st[1] += 1
                st[2] += int(BIAS.fails(name, b))
                st[3] = max(st[3], abs(b.mean))
                st[4] = max(st[4], abs(b.mean) / b.stderr if b.stderr > 0 else 0.0)
        secs = time.perf_counter() - t0
        for key, label in (("rn", v.name), ("rz", f"{name} exact rounded toward zero")):
            b, nb, alarms, mm, mz = stats[key]
            z = abs(b.mean) / b.stderr if b.stderr > 0 else 0.0
            verdict = "fail" if BIAS.fails(name, b) else "pass"
            row = {"store": label, "format": name, "rows": rows, "cols": cols, "batches": nb,
                   "alarms": alarms, "max_abs_mean": mm, "max_z": mz, "run_mean": b.mean,
                   "run_z": z, "run_verdict": verdict, "seconds": secs}
            out.append(row)
            echo(f"{label:34} {nb:8d} {alarms:7d} {mm:11.4f} {mz:8.2f} {b.mean:+9.4f} "
                 f"{z:8.2f} {verdict:>12} {secs:6.0f}")
    return out


def compile_benchmark(echo=print) -> list[dict]:
    """Seconds of ``normcheck check`` (a fresh process, as a user runs it) of the torch-extension
    example on a text never built and on the same text again, and of a file including only
    CUDA's headers the same two ways.  The text is made new by a comment naming the time."""
    import importlib.util
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from normcheck.kernels import CUDA_SRC

    ex = CUDA_SRC / "examples"
    cases = [("cuda headers only", "warp_per_row")]
    if importlib.util.find_spec("torch") is None:
        echo("torch is not installed: the torch-extension example is left out "
             "(pip install torch; a CPU build is enough)")
    else:
        cases.insert(0, ("torch extension", "torch_extension"))
    out = []
    with tempfile.TemporaryDirectory(prefix="normcheck-bench-") as d:
        for label, name in cases:
            spec = Path(d) / f"{name}.toml"
            spec.write_text((ex / f"{name}.toml").read_text())
            src_name = _spec_source(spec)
            (Path(d) / src_name).write_text((ex / src_name).read_text() +
                                            f"\n// normcheck bench compile {time.time_ns()}\n")
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "normcheck", "check", str(spec),
                                    "--search", "0", "--examples", "8"], cwd=d,
                                   capture_output=True, text=True)
                times.append(time.perf_counter() - t0)
                if r.returncode not in (0, 1):
                    echo(f"{label}: check failed (exit {r.returncode}): "
                         f"{r.stderr.strip().splitlines()[-1:]}")
                    break
            row = {"file": label, "first_s": times[0],
                   "second_s": times[1] if len(times) > 1 else None}
            out.append(row)
            second = f"{row['second_s']:.1f} s" if row["second_s"] is not None else "-"
            echo(f"{label:20} first check (new text) {times[0]:6.1f} s   "
                 f"second (unchanged) {second}")
    echo("targets (issue 34, a 2-core machine): a torch-including file's first check <= 90 s, "
         "its second <= 15 s")
    return out


def _spec_source(spec) -> str:
    import tomllib

    return tomllib.loads(spec.read_text())["source"]


def workers_benchmark(sources=5, echo=print) -> list[dict]:
    """Milliseconds a user source's worker of its own costs (#44): for ``sources`` distinct
    CUDA C kernels (each its own build, so its own worker) the first launch -- the worker
    started isolated and sandboxed, the module loaded -- against the next launch of the same
    kernel (its worker running); the same for Triton files where Triton is installed; then a
    default check (``check_kernel``, 64 rows a family, no search) of one more user file, whose
    worker is new, as the share of that check the start is."""
    import importlib.util
    import statistics
    import tempfile
    from pathlib import Path

    from normcheck import check
    from normcheck.backends import get_backend

    be = get_backend("cpu")
    rows = []

    def timed(k, args, block):
        t0 = time.perf_counter()
        k(1, block, args)
        return (time.perf_counter() - t0) * 1e3

    def fresh_then_warm(k, worker, args, block):
        timed(k, args, block)  # the module built and loaded
        worker.restart()  # the next launch starts a fresh worker, as a new source's does
        return timed(k, args, block), timed(k, args, block)

    cuda = []
    for i in range(sources):
        k = be.compile(f'extern "C" __global__ void k(float* y) {{ y[threadIdx.x] = {i}; }}',
                       "k")
        cuda.append(fresh_then_warm(k, k.module.worker(), [np.zeros(32, np.float32)], 32))
    rows.append(("CUDA C", cuda))
    tri = []
    if importlib.util.find_spec("triton") is not None:
        from normcheck.backends import for_source

        tb = for_source("cpu", "x.py")
        with tempfile.TemporaryDirectory(prefix="normcheck-bench-") as d:
            for i in range(max(2, sources // 2)):
                p = Path(d) / f"k{i}.py"
                p.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                             "def k(Y):\n    tl.store(Y + tl.arange(0, 32), "
                             f"tl.full([32], {i}, tl.float32))\n")
                k = tb.compile(str(p), "k")
                tri.append(fresh_then_warm(k, k.worker(), [np.zeros(32, np.float32)], 32))
        rows.append(("Triton", tri))
    out = []
    echo(f"{'source':8} {'sources':>7} {'first launch ms':>16} {'warm launch ms':>15} "
         f"{'a fresh worker ms':>18}")
    for label, pairs in rows:
        if not pairs:
            continue
        f = statistics.median(a for a, _ in pairs)
        w = statistics.median(b for _, b in pairs)
        out.append({"source": label, "n": len(pairs), "first_ms": f, "warm_ms": w,
                    "worker_ms": f - w})
        echo(f"{label:8} {len(pairs):7d} {f:16.1f} {w:15.1f} {f - w:18.1f}")
    with tempfile.TemporaryDirectory(prefix="normcheck-bench-") as d:
        src = Path(d) / "rms.cu"
        src.write_text(_BENCH_RMS)
        t0 = time.perf_counter()
        r = check.check_kernel(str(src), "rms", "rmsnorm", "fp16", search=0)
        total = (time.perf_counter() - t0) * 1e3
    share = out[0]["worker_ms"] / total if out else float("nan")  # a CUDA C source's
    echo(f"a default check of a user file (64 rows a family, no search): {total:.0f} ms, "
         f"verdict {r.verdict}; its worker's start {100 * share:.1f} % of it")
    out.append({"source": "check", "check_ms": total, "worker_share": share})
    return out


_BENCH_RMS = r"""
#include <cuda_fp16.h>
extern "C" __global__ void rms(__half* y, const __half* x, const __half* g, float eps, int rows,
                               int cols) {
  __shared__ float part[256];
  const __half* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = __half2float(xr[i]); s += v * v; }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
    __syncthreads();
  }
  const float r = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2half(__half2float(xr[i]) * r * __half2float(g[i]));
}
"""


def triton_benchmark(rows: int = 2047, cols: int = 4096, echo=print) -> list[dict]:
    """A Triton kernel's check against the same algorithm's CUDA C check (#48): for RMSNorm and
    two-pass LayerNorm in bf16 (the built-ins of cuda_src/triton/norms.py and their CUDA C
    twins), the wall time of a default check (every family, 64 rows a family, no search: its
    second run, warm -- builds and workers up) and its ratio to CUDA's; then a long run of
    ``rows`` rows of ``cols`` on each, in rows/s of the whole check (oracle and measures
    included), and one launch of those rows in rows/s inside the launch (the executor's own
    pace: one program a row, run in batches), with the process's peak memory.  Figures, not a
    test: what the executor costs."""
    import importlib.util

    from normcheck import check, kernels
    from normcheck import launch as launch_mod
    from normcheck.check.forward import peak_rss_mib

    if importlib.util.find_spec("triton") is None:
        echo("Triton is not installed here (pip install 'normcheck[triton]')")
        return []
    pairs = (("rmsnorm", "rmsnorm_rms_bf16_upcast_square",
              "triton_rmsnorm_rms_bf16_upcast_square"),
             ("layernorm", "layernorm_two_pass_bf16_upcast_square",
              "triton_layernorm_two_pass_bf16_upcast_square"))
    out = []
    for norm, cuda_name, triton_name in pairs:  # the checks first: the peak is theirs
        base = None
        for language, name in (("CUDA C", cuda_name), ("Triton", triton_name)):
            v = kernels.get(name)
            spec = v.spec()

            def one(**more):
                t0 = time.perf_counter()
                r = check.run(check.CheckOptions(spec=spec, norm=str(v.norm), dtype=v.storage,
                                                 examples=64, search=0, seed=0, **more))
                return time.perf_counter() - t0, r

            one()  # builds, the worker, the imports
            (t, r), (t2, _) = one(), one()
            t = min(t, t2)  # the better of two: a loaded machine's noise is one-sided
            tl, _ = one(rows=rows, cols=cols)
            base = base or t  # the first of the pair: CUDA C's
            out.append({"norm": norm, "language": language, "kernel": name, "check_s": t,
                        "over_cuda": t / base, "long_rows_per_s": rows / max(tl - t, 1e-9),
                        "verdict": str(r.verdict), "peak_rss_mib": peak_rss_mib()})
    rng = np.random.default_rng(0)
    for row in out:  # then one launch of the long run's rows, in the launch
        v = kernels.get(row["kernel"])
        target = kernels.target(v)
        (kern,) = target.kernels.values()  # the one entry of its spec
        fmt = formats.get(v.storage)
        case = launch_mod.Case(
            x=fmt.cast(rng.standard_normal((rows, cols), np.float32)),
            gamma=fmt.cast(rng.standard_normal(cols)),
            beta=fmt.cast(rng.standard_normal(cols)) if v.has_beta else None)
        seconds = []
        for _ in range(2):  # the first warms the batch size up
            target(case)
            seconds.append(kern.last_seconds)
        row["launch_rows_per_s"] = rows / min(seconds)
    echo(f"{'norm':10} {'language':8} {'check s':>8} {'x CUDA':>7} {'long rows/s':>12} "
         f"{'launch rows/s':>14} {'peak MiB':>9}")
    for row in out:
        echo(f"{row['norm']:10} {row['language']:8} {row['check_s']:8.2f} "
             f"{row['over_cuda']:7.2f} {row['long_rows_per_s']:12,.0f} "
             f"{row['launch_rows_per_s']:14,.0f} {row['peak_rss_mib']:9.0f}")
    echo("targets (#48): a Triton check within 1.5x of CUDA's; a long run of at least 5,000 "
         f"rows/s at {cols} columns (the executor's pace: launch rows/s)")
    return out
