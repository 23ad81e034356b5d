"""The report's sweep: every built-in variant × family × width, seeded, measured against the
oracle, one record at a time into ``results.json``.

Each record is written when it completes (the file is replaced atomically), so an interrupted
or crashed sweep keeps everything it measured, and a rerun into the same folder skips the
records already there.  Besides the family grid, two parameter sweeps feed the plots: offset
rows at a fixed conditioning κ = |μ|/σ (naive vs two-pass vs Welford), and fp16 rows of a given
largest magnitude (the overflow cliff of each precision order).

Inputs depend on (seed, family, format, width) only, so every variant of a storage format sees
the same rows; the worst row of a record is saved once per input batch under ``worst/``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normcheck import __version__, cases, escape, families, kernels, metrics
from normcheck.backends import get_backend
from normcheck.files import read_limited
from normcheck.errors import KernelError, invalid
from normcheck.launch import Case
from normcheck.report import folder
from normcheck.report.findings import CHECK_TASK
from normcheck.report.record import Record, RecordError

__all__ = ["Plan", "plan", "CHECK_TASK", "run_sweep", "load_results", "Record", "HIST_BINS", "KAPPA_VARIANTS",
           "MAGNITUDE_VARIANTS"]

#: Histogram bin edges of the ULP error (the last bin holds everything above 64, and inf).
HIST_BINS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 64.0, math.inf]
KAPPA_VARIANTS = [f"layernorm_{a}_{s}" for a in ("naive", "two_pass", "welford")
                  for s in ("fp32", "fp16_upcast_square", "bf16_upcast_square")]
MAGNITUDE_VARIANTS = [f"{n}_fp16_{o}" for n in ("rmsnorm_rms", "layernorm_naive",
                                                "layernorm_two_pass")
                      for o in ("upcast_square", "square_upcast", "storage_accumulate")]


@dataclass(frozen=True)
class Task:
    """One record to measure."""

    kernel: str
    family: str
    cols: int
    rows: int
    param: tuple = ()  # (("kappa", 1e3),) or (("magnitude", 256.0),)
    spec: str = ""     # a user kernel: the path of its spec (kernel is its label)

    @property
    def key(self) -> str:
        p = ",".join(f"{k}={v:g}" for k, v in self.param)
        return f"{self.kernel}|{self.family}|{self.cols}|{self.rows}|{p}"


@dataclass
class Plan:
    mode: str
    tasks: list
    seed: int
    pattern: str | None = None   # --kernels: also selects the quantised built-ins


def user_specs(paths) -> list:
    """[(label, spec path)] of the user kernels named by ``--spec`` (files, or folders whose
    *.toml are forward kernel specs); labels are the spec's entry, made unique."""
    from normcheck import spec as specs

    out, seen = [], set()
    for p in paths or ():
        p = Path(p)
        if p.is_dir():
            files = sorted(p.glob("*.toml"))
            if not files:
                raise invalid("--spec", str(p), "a kernel spec (.toml) or a folder holding some")
        elif p.is_file():
            files = [p]
        else:
            raise invalid("--spec", str(p), "an existing kernel spec (.toml) or folder of them")
        for f in files:
            sp = specs.load(f)
            if sp.backward or sp.quant or not sp.norm or not sp.dtype or sp.entries[0] is None:
                if p.is_dir():
                    continue  # a folder may hold other specs: only forward kernels are swept
                raise invalid("--spec", str(f), "a forward kernel spec naming its norm, dtype "
                              "and entry (a backward or quantised spec is checked with "
                              "normcheck check)")
            label = sp.entries[0]
            if label in seen:  # two specs of one entry: each labelled by its spec file
                label = f"{sp.entries[0]} [{f.name}]"
            k = 2
            while label in seen:
                label = f"{sp.entries[0]} [{f.name}~{k}]"
                k += 1
            seen.add(label)
            out.append((label, str(f.resolve())))
    return out


def plan(mode="quick", kernels_pattern=None, seed=0, specs=None) -> Plan:
    """The records of a sweep: ``quick`` (one width a family, 32 rows) or ``full`` (every width
    of each family, 128 rows); ``specs`` adds user kernels ([(label, spec path)], see
    :func:`user_specs`) over the same families and widths (within each spec's width
    contract)."""
    if mode not in ("quick", "full"):
        raise invalid("mode", mode, '"quick" or "full"')
    import fnmatch

    from normcheck.backends.triton.backend import available as triton_missing

    # the built-in Triton norms beside the CUDA ones, where Triton is installed
    vs = [v for v in kernels.variants(language="cuda" if triton_missing() else None)
          if kernels_pattern is None or fnmatch.fnmatchcase(v.name, kernels_pattern)]
    qs = [v for v in kernels.variants(kind="quantised")
          if kernels_pattern is None or fnmatch.fnmatchcase(v.name, kernels_pattern)]
    if not vs and not qs and not specs:
        raise invalid("--kernels", kernels_pattern, "a pattern matching built-in kernels",
                      "list them with `normcheck kernels`; e.g. 'layernorm_*fp16*'")
    quick = mode == "quick"
    rows = 32 if quick else 128
    tasks = []
    for v in vs:
        for fam in families.FAMILIES.values():
            widths = fam.cols if not quick else (fam.cols[:1] if fam.name != "tails"
                                                 else (1, 3, 33, 257))
            for c in widths:
                tasks.append(Task(v.name, fam.name, c, rows))
    from normcheck import spec as spec_mod

    for label, path in specs or ():
        # a kernel of yours at every width the check runs it, quick or full (#64: quick ran one
        # width a family, 768, and called safe a kernel check fails on its path above 1024) ...
        sp = spec_mod.load(path)
        for fam in families.FAMILIES.values():
            for c in families.widths(fam.name, sp.cols, sp.cols_multiple_of):
                tasks.append(Task(label, fam.name, c, rows, (), path))
        # ... and the check itself, every run of it: its verdict is the report's for the kernel
        tasks.append(Task(label, CHECK_TASK, max(families.widths("gaussian", sp.cols,
                                                                 sp.cols_multiple_of)),
                          0, (), path))
    names = {v.name for v in vs}
    kd = 256 if quick else 1024
    for name in KAPPA_VARIANTS:
        if name not in names:
            continue
        fmt = kernels.get(name).fmt
        top = math.log10(families.kappa_max(fmt))
        for k in np.arange(0.0, top + 1e-9, 1.0 if quick else 0.5):
            tasks.append(Task(name, "offset", kd, rows, (("kappa", float(10**k)),)))
    for name in MAGNITUDE_VARIANTS:
        if name not in names:
            continue
        for e in range(4, 17):
            mag = min(2.0**e, 65504.0)
            tasks.append(Task(name, "magnitude", 256 if quick else 1024, rows,
                              (("magnitude", mag),)))
    return Plan(mode, tasks, seed, kernels_pattern)


# ------------------------------------------------------------------------------------------------
def _inputs(task: Task, fmt, seed):
    """The rows of a task: they depend on the seed, family, format and width only."""
    p = dict(task.param)
    rng = np.random.default_rng([seed, task.cols, fmt.bits, int(p.get("kappa", 0) * 16),
                                 int(p.get("magnitude", 0))])
    if "kappa" in p:
        x = fmt.cast(p["kappa"] + rng.standard_normal((task.rows, task.cols)))
    elif "magnitude" in p:
        z = rng.standard_normal((task.rows, task.cols))
        z = z / np.max(np.abs(z), axis=1, keepdims=True)
        x = fmt.cast(z * p["magnitude"])
    else:
        x = families.generate(task.family, fmt, task.rows, task.cols, seed=seed)
    g, b = families.weights(fmt, task.cols, seed=seed)
    r = fmt.cast(0.1 * rng.standard_normal((task.rows, task.cols)))
    return x, g, b, r


def _measured(norm, ref, rows, g, b, eps, convention, y):
    """The record's measurement (normcheck.measure, the check's): per element ULP errors and
    classes, the ratio to the sound bound (the check's fail rule), ordinal distance."""
    from normcheck import bounds, measure as measure_mod
    from normcheck.check.tolerances import TOLERANCES

    E = bounds.sound_bound_of(norm, ref, rows, g, b, eps=eps, convention=convention,
                              storage=ref.fmt)
    return measure_mod.measure(ref, y, E=E, floor=TOLERANCES[ref.fmt.name].fail_floor,
                               keep=("ulp",), hist=False)


_TARGETS = {}


def _user_judge(path, backend):
    """(ForwardJudge, spec) of a user kernel's spec, bound once per process (a cluster worker too),
    resolved as normcheck check resolves it."""
    key = (path, getattr(backend, "name", backend))
    if key not in _TARGETS:
        from normcheck.check.judge import ForwardJudge
        from normcheck.check.options import CheckOptions
        from normcheck.check.resolve import resolve

        r = resolve(CheckOptions(spec=path, backend=backend))
        _TARGETS[key] = (ForwardJudge(r.target, r.setup()), r.spec)
    return _TARGETS[key]


def _measure_user(task: Task, seed: int, backend) -> tuple[Record, dict | None]:
    """A user kernel's task: the same rows, run through its spec, judged as the check does."""
    judge, sp = _user_judge(task.spec, backend)
    fmt = judge.fmt
    x, g, b, r = _inputs(task, fmt, seed)
    n = judge.norm
    rec = {"kernel": task.kernel, "norm": n.name, "algorithm": "yours", "storage": fmt.name, "order": None, "convention":
           sp.convention if n.fused else None, "fast_math": False, "user": True,
           "spec": task.spec, "family": task.family, "cols": task.cols, "rows": task.rows,
           "param": dict(task.param), "key": task.key}
    case = judge.make_case(x, g, b, r if n.fused else None, judge.eps)
    t0 = time.perf_counter()
    m, fails = judge.measure(task.family, case)
    fatal = [f for f in fails if f.kind not in ("accuracy", "nonfinite", "unwritten")]
    if m is None or fatal:
        f = (fatal or fails)[0]
        rec.update({"error": {"kind": f.kind, "detail": f.detail}, "max_ulp": math.inf,
                    "p99_ulp": math.inf, "mean_ulp": math.inf, "nonfinite": {}, "worst": None,
                    "seconds": time.perf_counter() - t0})
        return Record(**rec), None
    y = m.y
    mm = m.full()
    extra = {"unwritten": int(mm.unwritten)}
    from normcheck.check.resolve import sha256

    # the files by their SHA-256 too: the case replays from any folder while they are unchanged
    # (without them it replayed only from a folder above the kernel's source)
    desc = {"source": str(sp.source), "sha256": sha256(sp.source), "entries": sp.entries,
            "norm": n.name, "dtype": fmt.name, "spec": task.spec,
            "spec_sha256": sha256(task.spec)}
    return _record(rec, task, fmt, x, y, case.gamma, case.beta, case.residual, m.ref, mm,
                   t0, desc, "normcheck replay {dir}/worst/{file}", extra)


def _checked_user(task: Task, seed: int, backend) -> tuple[Record, None]:
    """A kernel of yours judged by ``normcheck check --spec`` with its defaults (every family,
    width, hazard, large-index and padded-pitch run and the search): its record holds the
    check's verdict -- an error (the check's headline failure) where it fails, so the report
    calls safe nothing the check fails, and ``--strict`` exits 1 on it."""
    from normcheck import check
    from normcheck.errors import NormcheckError

    _judge, sp = _user_judge(task.spec, backend)
    rec = {"kernel": task.kernel, "norm": sp.norm, "algorithm": "yours", "storage": sp.dtype,
           "user": True, "spec": task.spec, "family": task.family, "cols": task.cols,
           "param": {}, "key": task.key}
    t0 = time.perf_counter()
    try:
        r = check.run(check.CheckOptions(spec=task.spec, backend=getattr(backend, "name",
                                                                         backend), seed=seed))
    except NormcheckError as e:  # an error is never a pass
        rec.update({"rows": 0, "max_ulp": math.inf, "seconds": time.perf_counter() - t0,
                    "error": {"kind": "error", "detail": escape.one_line(str(e))}})
        return Record(**rec), None
    widths = sorted({int(c) for f in r.families for c in (getattr(f, "cols", None) or [])})
    ob = r.of_bound
    rec.update({"rows": int(r.rows_checked), "max_ulp": float(r.max_ulp),
                "of_bound": float(ob) if ob is not None else None,
                "cols": widths[-1] if widths else task.cols,
                "seconds": time.perf_counter() - t0})
    if r.verdict == "fail":
        f = next((f for f in r.failures if r.cause is not None and f.cause is r.cause),
                 r.failures[0] if r.failures else None)
        kind = str(f.kind) if f is not None else "error"
        said = f"normcheck check fails it ({len(r.failures)} failure(s); {f.family}: {kind})" \
            if f is not None else "normcheck check fails it"
        if r.cause:
            said += f"; likely cause: {r.cause}"
        rec["error"] = {"kind": kind, "detail": escape.one_line(said)}
    return Record(**rec), None


def measure(task: Task, seed: int, backend, workers=None) -> tuple[Record, dict | None]:
    """One task, measured: (its record, the worst row's case to save as ``case["file"]`` under
    the output folder, or None).  Pure: it depends on the task and the seed only, writes
    nothing, and may run anywhere (a worker of a cluster)."""
    if task.spec and task.family == CHECK_TASK:
        return _checked_user(task, seed, backend)
    if task.spec:
        return _measure_user(task, seed, backend)
    v = kernels.get(task.kernel)
    fmt = v.fmt
    x, g, b, r = _inputs(task, fmt, seed)
    rec = {"kernel": v.name, "norm": v.norm, "algorithm": v.algorithm, "storage": v.storage,
           "order": v.order, "convention": v.convention, "fast_math": v.fast_math,
           "family": task.family, "cols": task.cols, "rows": task.rows,
           "param": dict(task.param), "key": task.key}
    t0 = time.perf_counter()
    launch = {"workers": workers} if workers else {}
    try:
        out = kernels.run_case(v, Case(x=x, gamma=g, beta=b, residual=r if v.fused else None),
                               backend, **launch)
    except KernelError as e:
        rec.update({"error": {"kind": e.kind, "detail": str(e)}, "max_ulp": math.inf,
                    "p99_ulp": math.inf, "mean_ulp": math.inf, "nonfinite": {}, "worst": None,
                    "seconds": time.perf_counter() - t0})
        return Record(**rec), None
    y = out["output"]
    ref, rows = kernels.reference(v, x, g, b, residual=r if v.fused else None)
    m = _measured(v.norm, ref, rows, g, b, np.float32(1e-5),
                  v.convention or "exact", y)
    return _record(rec, task, fmt, x, y, g, b if v.has_beta else None, r if v.fused else None,
                   ref, m, t0, {"variant": v.name},
                   f"normcheck replay {{dir}}/worst/{{file}} --variant {v.name}", {})


def _record(rec, task, fmt, x, y, g, b, r, ref, m, t0, kernel_desc, replay_cmd, extra):
    """The record of a measured task (``m``, a normcheck.measure.Measurement holding its ulp
    array) and the worst row's case to save.  Over all elements an infinite ULP (a non-finite
    failure) makes max, p99 (where it weighs in), mean and the scaled max infinite."""
    ulp = m.ulp
    hist, _ = np.histogram(np.minimum(np.nan_to_num(ulp, nan=np.inf), 1e300),
                           bins=[e if math.isfinite(e) else 1e301 for e in HIST_BINS])
    i, j = (int(v) for v in np.unravel_index(max(m.argmax_ulp, 0), ulp.shape))
    u = np.where(np.isnan(ulp), np.inf, ulp).ravel()
    classes = dict(m.classes)
    fname = (f"{fmt.name}-{task.family}-{task.cols}"
             f"{''.join(f'-{k}{val:g}' for k, val in task.param)}-row{i}.npz")
    if task.spec:  # a user kernel's label, as a file name a shell takes without quotes
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task.kernel)
        fname = f"{safe}-{fname}"
    case = None
    if not task.param:  # the parameter sweeps only feed the plots
        case = {"file": f"worst/{fname}", "kernel": kernel_desc, "x": x[i:i + 1],
                "gamma": g, "beta": b, "residual": r[i:i + 1] if r is not None else None,
                "note": f"{task.family} row {i} of the report's sweep"}
    rec.update({
        "max_ulp": float(m.max_ulp), "p99_ulp": float(np.percentile(u, 99, method="higher")),
        "mean_ulp": m.mean_ulp,
        "mean_signed_ulp": m.bias().mean if m.row_signed is not None else None,
        "max_scaled_ulp": math.inf if m.inf_ulp else float(m.max_scaled),
        "max_bits": m.max_bits if m.max_bits is not None else math.inf,
        "nonfinite": {k: classes[k] for k in metrics.FAILURE_CLASSES}, "classes": classes,
        "of_bound": float(m.max_ratio), "beyond_bound": int(m.over),
        "histogram": [int(h) for h in hist],
        "max_abs_x": float(np.nanmax(np.abs(x.astype(np.float64)))) if np.isfinite(
            x.astype(np.float64)).any() else math.inf,
        "worst": {"row": int(i), "col": int(j), "ulp": float(ulp[i, j]),
                  "x": float(x[i, j]), "kernel": float(y[i, j]), "exact": float(ref.exact[i, j]),
                  "file": f"worst/{fname}" if not task.param else None,
                  "replay": replay_cmd.replace("{file}", fname) if not task.param else None},
        **extra,
        "seconds": time.perf_counter() - t0,
    })
    return Record(**rec), case


def _save_case(out_dir: Path, case: dict | None):
    if case is None:
        return
    case = dict(case)
    path = out_dir / case.pop("file")
    if not path.exists():
        cases.save_case(path, **case)


# ------------------------------------------------------------------------------------------------
def provenance(backend, seed, mode) -> dict:
    import hypothesis
    import mpmath

    be = get_backend(backend) if isinstance(backend, str) else backend
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    p = be.provenance()
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"normcheck": __version__, "git_commit": commit or "unknown", "backend": p["backend"],
            "compiler": p.get("compiler"), "flags": p.get("flags"), "fmad": p.get("fmad"),
            "sandbox": p.get("sandbox"), "cpu": cpu, "gpu": p.get("device") if be.capabilities.device_timings else None,
            "cpu_vs_gpu": p.get("cpu_vs_gpu"),
            "python": sys.version.split()[0], "numpy": np.__version__,
            "mpmath": mpmath.__version__, "hypothesis": hypothesis.__version__,
            "seed": seed, "mode": mode,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


class ResultsFile:
    """results.json, kept valid after every record: one line of provenance, one line per record,
    and the closing line; a new record overwrites the closing line and writes it again.  A file
    cut short by a crash is read back up to its last complete record."""

    HEAD = '{"provenance": %s, "records": [\n'
    TAIL = "\n]}\n"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._n = 0  # records in the file

    def load(self) -> dict:
        if not self.path.exists() and not self.path.is_symlink():
            return {}
        try:
            text = read_limited(self.path, "results file", RESULTS_BYTES,
                                "a results.json written by normcheck").decode("utf-8")
        except UnicodeDecodeError as e:
            raise invalid("results file", str(self.path), f"a readable results.json ({e})",
                          "delete it, or choose another --out") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        except RecursionError:
            raise self._bad("it nests too deep") from None
        if data is not None:
            data = self._check(folder.restore(data))
            self._n = len(data["records"])  # appends continue after the records read
            if not self._own_layout(text, self._n):
                # whole JSON, but not in the layout an append relies on (one line each, the
                # closing line last: `jq -c` writes it on one line): rewritten whole, atomically
                self.write_all(data)
            return data
        lines = text.split("\n")
        first = lines[0]
        try:
            if not (first.startswith('{"provenance": ') and first.endswith(', "records": [')):
                raise ValueError(first[:60])
            head = json.loads(first[len('{"provenance": '):-len(', "records": [')])
            if not isinstance(head, dict):
                raise ValueError("not an object")
        except ValueError:
            raise invalid("results file", str(self.path),
                          "a results.json whose first line (the sweep's provenance) is whole; "
                          "it is cut or corrupt, so the records in it cannot be resumed",
                          "delete it (or choose another --out) to measure again") from None
        # a record cut by a crash is dropped; every whole record is kept, before it or after
        records, dropped = [], 0
        for line in lines[1:]:
            line = line.lstrip(",").strip()
            if not line or line == "]}":
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if isinstance(rec, dict) and "key" in rec:
                records.append(rec)
            else:
                dropped += 1
        data = self._check(folder.restore({"provenance": head, "records": records}))
        self.write_all(data)
        self.dropped = dropped
        return data

    def _own_layout(self, text: str, n: int) -> bool:
        """Whether ``text`` is laid out as :meth:`write_all` writes it: the head line, one line
        per record, the closing line -- what :meth:`append` overwrites the tail of."""
        lines = text.split("\n")
        if not (text.endswith(self.TAIL) and lines[0].startswith('{"provenance": ') and
                lines[0].endswith(', "records": [')):
            return False
        body = [ln for ln in lines[1:-2] if ln]
        return len(body) == n and all(ln.lstrip(",").startswith("{") for ln in body)

    def _bad(self, why):
        return invalid("results file", str(self.path), "a results.json written by normcheck",
                       f"{why}; delete it (or choose another --out) to measure again")

    def _check(self, data) -> dict:
        """The results checked against their schema (:meth:`Record.from_json`): a file of the
        wrong shape is an error naming what is wrong, never an internal error later."""
        if not isinstance(data, dict) or not isinstance(data.get("provenance"), dict) or \
                not isinstance(data.get("records"), list):
            raise self._bad("it is not {provenance: {...}, records: [...]}")
        recs = []
        for i, rec in enumerate(data["records"]):
            try:
                recs.append(Record.from_json(rec))
            except RecordError as e:
                raise self._bad(f"record {i}: {e}") from None
        data["records"] = recs
        prov = data["provenance"]
        for k, t in (("seed", int), ("backend", str), ("mode", str)):
            if k in prov and not isinstance(prov[k], t):
                raise self._bad(f"provenance.{k} is not a {t.__name__}")
        return data

    def write_all(self, data: dict):
        body = ",\n".join(folder.json_text(r.to_json()) for r in data["records"])
        folder.write(self.path, self.HEAD % folder.json_text(data["provenance"]) + body + self.TAIL)
        self._n = len(data["records"])

    def append(self, rec: Record):
        line = ("\n," if self._n else "") + folder.json_text(rec.to_json())
        with folder.open_append(self.path) as f:
            f.seek(-len(self.TAIL), os.SEEK_END)
            f.write((line + self.TAIL).encode())
            f.flush()
            os.fsync(f.fileno())
        self._n += 1


#: The largest results.json normcheck reads (a full sweep writes a few MiB).
RESULTS_BYTES = 1 << 30

def load_results(out_dir) -> dict:
    return ResultsFile(Path(out_dir) / "results.json").load()


def run_sweep(p: Plan, out_dir, backend="cpu", workers=None, progress=None,
              stop_after=None, cluster=None) -> dict:
    """Measure every task of the plan not already in ``out_dir/results.json``; returns the
    results.  ``stop_after`` stops after that many new records (tests use it to play a kill).
    ``cluster`` (an address, see :mod:`normcheck.report.cluster`) measures the tasks on a Dask
    cluster; this process stays the one writer of results.json, in completion order."""
    out_dir = folder.prepare(out_dir)
    be = get_backend(backend)
    rf = ResultsFile(out_dir / "results.json")
    results = rf.load()
    if results:
        prov = results["provenance"]
        if prov.get("seed") != p.seed or prov.get("backend") != be.name:
            raise invalid("--out", str(out_dir),
                          f"a folder of a sweep with seed {p.seed} on {be.name} (it holds seed "
                          f"{prov.get('seed')} on {prov.get('backend')})",
                          "choose another --out, or delete its results.json")
    else:
        results = {"provenance": provenance(be, p.seed, p.mode), "records": []}
        rf.write_all(results)
    done = {r.key for r in results["records"]}
    todo = [t for t in p.tasks if t.key not in done]
    measured = 0
    t_start = time.perf_counter()
    if cluster is None:
        stream = ((task, measure(task, p.seed, be, workers)) for task in todo)
    else:
        from normcheck.report import cluster as dask_cluster

        stream = dask_cluster.measure_all(cluster, measure, todo, p.seed, be.name, workers)
    try:
        for n, (task, (rec, case)) in enumerate(stream):
            _save_case(out_dir, case)
            results["records"].append(rec)
            rf.append(rec)
            measured += 1
            if progress:
                progress(len(done) + n + 1, len(p.tasks), rec, time.perf_counter() - t_start)
            if stop_after is not None and measured >= stop_after:
                break
    finally:
        close = getattr(stream, "close", None)
        if close:
            close()  # a cluster's futures cancelled, its client closed
    results["measured_now"] = measured
    return results
