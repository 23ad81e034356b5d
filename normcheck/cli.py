"""The `normcheck` command: argument parsing, exit codes, printing.

Exit codes: 0 success / pass, 1 a kernel failed its check, 2 cannot judge (bad arguments, compile
error, bad spec ...), 130 interrupted."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from pathlib import Path

from normcheck import __version__
from normcheck import errors, formats, norms
from normcheck.errors import NormcheckError, invalid

__all__ = ["main", "build_parser"]

#: The storage formats, as the registry names them (normcheck.formats).
STORAGE = tuple(formats.FORMATS)

NORM_CHOICES = norms.NORMS


class _Parser(argparse.ArgumentParser):
    """argparse, with what a mistyped command line needs: an unknown flag after a command is
    told in that command's own usage with the flag it most resembles (``--dtpye``: did you
    mean --dtype?), and an unknown command with the command it most resembles."""

    def parse_args(self, args=None, namespace=None):
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = self._subparsers._group_actions[0].choices.get(getattr(ns, "command", None)) \
                if self._subparsers else None
            (sub or self).error(_unrecognized(sub or self, extra))
        return ns

    def error(self, message):
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        # the error and the fix first, in one line: not 16 lines of usage before it (#64)
        self.exit(2, f"{self.prog}: error: {message}\n({self.prog} --help lists its options)\n")


def _unrecognized(parser: argparse.ArgumentParser, extra: list) -> str:
    """The unknown arguments, each flag with the one of ``parser`` it most resembles."""
    flags = [o for a in parser._actions for o in a.option_strings]
    parts = []
    for w in extra:
        close = difflib.get_close_matches(w.split("=", 1)[0], flags, n=1, cutoff=0.6) \
            if w.startswith("-") else []
        parts.append(f"{w} (did you mean {close[0]}?)" if close else w)
    return "unrecognized arguments: " + " ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="normcheck",
        description="How many ULPs from the exact result is a LayerNorm/RMSNorm kernel, on which "
                    "rows, in which precision, and why.")
    p.add_argument("--version", action="version", version=f"normcheck {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    k = sub.add_parser("kernels", help="list the built-in kernels")
    k.add_argument("--json", action="store_true", help="machine-readable output")
    k.add_argument("--norm", choices=NORM_CHOICES)
    k.add_argument("--storage", choices=STORAGE)
    k.add_argument("--kind", help="one kind of built-in: forward, dx, dparams, finalize or "
                   "quantised (default: every kind)")
    k.set_defaults(func=_kernels)

    c = sub.add_parser(
        "check", help="judge a kernel against the oracle (exit 0 pass or warn, 1 fail, 2 cannot "
                      "judge)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The default ABI (a kernel checked without --spec; grid = rows blocks of 256 "
               "threads, --block to change):\n"
               "  layernorm      (T* y, const T* x, const T* gamma, const T* beta, float eps, "
               "int rows, int cols)\n"
               "  rmsnorm        (T* y, const T* x, const T* gamma, float eps, int rows, "
               "int cols)\n"
               "  add_layernorm  (T* h, T* y, const T* x, const T* residual, const T* gamma, "
               "const T* beta, float eps, int rows, int cols)\n"
               "  add_rmsnorm, add_gemma_rmsnorm  the same without beta\n"
               "  --backward     (T* dx, const T* dy, const T* x, const T* gamma, const float* "
               "mean, const float* rstd, int rows, int cols)\n"
               "  --quant        a spec with roles output (codes), scales, scale "
               "(README: Quantised outputs)\n"
               "Any other signature: a spec (normcheck spec FILE --entry NAME writes one to "
               "start from).")
    c.add_argument("source", nargs="?", help="the .cu file (or `source` in the spec)")
    c.add_argument("--entry", help="kernel name, or a template instantiation like rms<__half>")
    c.add_argument("--norm", choices=NORM_CHOICES,
                   help="what the kernel computes (add_*: a fused residual add; gemma_rmsnorm "
                        "scales by 1+γ)")
    c.add_argument("--dtype", choices=STORAGE,
                   help="storage format of x (and of γ, β and y unless --out-dtype)")
    c.add_argument("--out-dtype", choices=STORAGE,
                   help="format of y when it differs from x's")
    c.add_argument("--dtypes", metavar="ROLE=FMT,...",
                   help=f"a role's own format: x ({', '.join(formats.ROWS)}), residual, h, "
                        f"gamma, beta, y, mean, rstd ({', '.join(STORAGE)}), e.g. "
                        "x=e4m3,gamma=fp32,y=bf16")
    c.add_argument("--block", type=int, default=256,
                   help="threads per block of the default ABI (default 256; a spec's launch "
                        "table gives its own)")
    c.add_argument("--spec", help="a TOML kernel spec for kernels outside the default ABI")
    c.add_argument("--op", metavar="[MODULE:]CALL",
                   help="call the project's own Python function as its users do, e.g. "
                        "\"rms_norm_forward(x, weight, eps, 0.0, 'llama', None)\" (a function "
                        "of SOURCE) or liger_kernel.ops.rms_norm:rms_norm_forward(...) (an "
                        "installed module): every Triton kernel it launches runs on "
                        "normcheck's executor; names: x, residual, weight, bias, eps, rows, "
                        "cols, normalized_shape")
    c.add_argument("--op-output", default="0", metavar="INDEX|NAME",
                   help="where --op's y is: an index into what it returns (default 0), or "
                        "x/residual when it writes in place")
    c.add_argument("--op-h", metavar="INDEX|NAME",
                   help="where a fused --op leaves h = x + residual (as --op-output)")
    c.add_argument("--reference", choices=("exact", "hf"),
                   help="the definition judged against: exact (default) or hf (Hugging Face's "
                        "Llama RMSNorm: x̂ rounded to storage, then ×γ)")
    c.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a compile-time define (repeatable)")
    c.add_argument("--fast-math", action="append_const", dest="defines",
                   const="__USE_FAST_MATH__=1",
                   help="build as nvcc --use_fast_math does: __USE_FAST_MATH__ defined and "
                        "subnormals flushed to zero while the kernel runs (cpu backend; "
                        "-D NORMCHECK_FTZ for -ftz=true alone)")
    c.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                   help="a folder searched by #include (repeatable); a spec's source and "
                        "include may also lie beneath it (otherwise only beneath the spec's "
                        "own folder)")
    c.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"),
                   help="where the kernel runs: cpu (normcheck's SIMT emulation, everywhere; "
                        "the default), cuda (a GPU with PyCUDA), auto (cuda where available)")
    c.add_argument("--arch", default=None, metavar="SM",
                   help="the GPU architecture the cpu backend presents (__CUDA_ARCH__), e.g. "
                        "sm_80; default sm_90, or arch in the spec")
    c.add_argument("--examples", type=int, default=64,
                   help="rows per family, about (default 64: an odd number a width, so 31 "
                        "each at two widths)")
    c.add_argument("--search", type=int, default=40,
                   help="examples of the targeted Hypothesis search (default 40; 0 skips it)")
    c.add_argument("--rows", type=int, default=None, metavar="N",
                   help="a long run of N more rows (streamed in bounded memory, with progress "
                        "on stderr), e.g. 1000000 on a GPU")
    c.add_argument("--cols", type=int, default=None, metavar="D",
                   help="the width of the long run (default 4096, or the nearest the spec "
                        "allows)")
    c.add_argument("--seed", type=int, default=0,
                   help="seed of the rows, the search and the block orders (same seed, same "
                        "verdict)")
    c.add_argument("--explain", action="store_true",
                   help="say what fail and warn mean, with each tolerance's reason, and exit")
    c.add_argument("--timeout", type=float, default=None,
                   help="seconds a launch may run (cpu backend; default 60)")
    c.add_argument("--backward", action="store_true",
                   help="judge a backward kernel (dx, dγ, dβ); without a spec the ABI of "
                        "cuda_src/backward.cu's dx kernels")
    c.add_argument("--orders", type=int, default=None,
                   help="--backward: seeded block orders for dγ's run-to-run spread (default 8)")
    c.add_argument("--quant", metavar="FIELDS", default=None,
                   help="judge a quantised output under a contract: a preset (vllm, trtllm, "
                        "flashinfer, te, exact, hf) or KEY=VALUE,... e.g. contract=vllm,"
                        "granularity=per_token,format=e4m3 (over the spec's quant table)")
    c.add_argument("--strict", action="store_true", help="exit 1 on warn too")
    c.add_argument("--json", action="store_true", help="strict JSON on stdout")
    c.add_argument("--junit", metavar="FILE", default=None,
                   help="write JUnit XML: a test case per family and one for the search")
    c.add_argument("--summary", metavar="FILE", default=None,
                   help="write a markdown summary (appends: $GITHUB_STEP_SUMMARY)")
    c.add_argument("--github", action="store_true",
                   help="print GitHub Actions annotations (::error file=...,line=...::) for each "
                        "failure, at the fault's line or the kernel's (on stderr with --json)")
    c.add_argument("--save-counterexample", metavar="PATH",
                   help="where to write the worst case (default .normcheck/counterexample-*.npz "
                        "on failure)")
    c.set_defaults(func=_check)

    r = sub.add_parser("report", help="sweep the built-in kernels and write the accuracy report")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="mode", action="store_const", const="quick",
                   help="one width per family, 32 rows (default; about 35 s on 2 cores once "
                        "normcheck's own parts are built, 25 s more the first time)")
    g.add_argument("--full", dest="mode", action="store_const", const="full",
                   help="every width of every family, 128 rows (a few minutes)")
    r.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    r.add_argument("--out", default=None, help="output folder (default reports/<mode>); a rerun "
                   "into the same folder resumes")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--kernels", metavar="PATTERN", help="only kernels matching this glob")
    r.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="measure the tasks on a Dask cluster: tcp://host:8786, a scheduler "
                        "file (*.json) or local:N (pip install 'normcheck[cluster]')")
    r.add_argument("--workers", type=int, default=None,
                   help="threads a launch runs on (cpu backend; default: all cores)")
    r.add_argument("--spec", action="append", default=[], metavar="SPEC",
                   help="a kernel of yours (its spec .toml, or a folder of specs), swept over "
                        "the same families and widths and shown beside the built-ins; "
                        "repeatable")
    r.add_argument("--compare", metavar="OLD_DIR", default=None,
                   help="an earlier report folder: list what got worse, better or stayed")
    r.add_argument("--strict", action="store_true",
                   help="exit 1 if a kernel of yours (--spec) is unsafe, and with --compare if "
                        "anything got worse")
    r.add_argument("--github", action="store_true",
                   help="print GitHub Actions annotations: an ::error per unsafe kernel of "
                        "yours, at its spec")
    r.add_argument("--field", action="store_true",
                   help="judge the field too (normcheck field: the public norm kernels as "
                        "their projects release them) and add its section")
    r.add_argument("--junit", metavar="FILE", default=None,
                   help="write JUnit XML: a test case per kernel and family (unsafe fails)")
    r.add_argument("--summary", metavar="FILE", default=None,
                   help="write the findings as markdown (appends: $GITHUB_STEP_SUMMARY)")
    r.set_defaults(func=_report, mode="quick")

    df = sub.add_parser("diff", help="what changed between two report folders or two "
                                     "check --json results")
    df.add_argument("old", help="the earlier report folder (or check --json file)")
    df.add_argument("new", help="the later one")
    df.add_argument("--strict", action="store_true", help="exit 1 if anything got worse")
    df.add_argument("--json", action="store_true", help="print the diff as JSON")
    df.add_argument("--all", action="store_true", help="list what stayed the same too")
    df.set_defaults(func=_diff)

    rp = sub.add_parser("replay", help="rerun a saved case and compare it with the oracle")
    rp.add_argument("case", nargs="?", help="a case file written by check, report or a "
                    "property (default: the newest in ./.normcheck/)")
    rp.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    rp.add_argument("--variant", help="run this built-in variant on the saved rows instead")
    rp.add_argument("--run-embedded-source", action="store_true",
                    help="compile and run the C++ source a case file carries (a case saved from "
                         "a kernel given as text): only for files you trust")
    rp.set_defaults(func=_replay)

    sk = sub.add_parser("spec", help="print a spec to start from for a kernel: its parameters "
                                     "read from the file, each role guessed from its name and "
                                     "type (and said so)")
    sk.add_argument("source", help="the .cu file")
    sk.add_argument("--entry", required=True,
                    help="kernel name, or a template instantiation like rms<__half, 8>")
    sk.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                    help="a compile-time define (repeatable)")
    sk.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                    help="a folder searched by #include (repeatable)")
    sk.add_argument("--arch", default=None, metavar="SM", help="e.g. sm_80 (default sm_90)")
    sk.add_argument("-o", "--output", default=None, metavar="FILE",
                    help="write the spec to FILE, its source named relative to FILE's folder "
                         "(printed, it is named relative to the current folder)")
    sk.set_defaults(func=_spec)

    cl = sub.add_parser("clean", help="remove .normcheck/ from this folder (counterexamples "
                                      "and search files; the build cache stays: normcheck "
                                      "cache clear)")
    cl.set_defaults(func=_clean)

    ca = sub.add_parser("cache", help="the build cache: where it is, how big; clear it")
    ca.add_argument("action", choices=("info", "clear"))
    ca.set_defaults(func=_cache)

    hd = sub.add_parser("headers", help="CUDA library headers (cuBLAS, cuRAND, NVTX ...) a "
                                        "file includes beside its kernels: list, fetch")
    hd.add_argument("action", choices=("list", "fetch"))
    hd.add_argument("packages", nargs="*", metavar="PACKAGE",
                    help="fetch: pip packages (e.g. nvidia-cublas); default: every one listed")
    hd.set_defaults(func=_headers)

    ag = sub.add_parser("agree", help="compare the built-in kernels on the cpu and cuda backends")
    ag.add_argument("--fmad", action="store_true", help="build for the GPU with --fmad=true")
    ag.set_defaults(func=_agree)

    sf = sub.add_parser("surface", help="the CUDA device API of the cpu backend: implemented / "
                                        "listed per section of the CUDA headers")
    sf.add_argument("--missing", action="store_true", help="list every missing function too")
    sf.set_defaults(func=_surface)

    fd = sub.add_parser("field", help="judge the field: the public norm kernels as their "
                                      "projects release them (normcheck/field/corpus.toml), "
                                      "each verdict against the one recorded")
    fd.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="a kernel, a project or a glob of kernel names (repeatable)")
    fd.add_argument("--list", action="store_true",
                    help="list the corpus (kernels, releases, recorded verdicts) and exit")
    fd.add_argument("--update", action="store_true",
                    help="record the verdicts and causes measured now in corpus.toml (a "
                         "checkout's; review the change)")
    fd.add_argument("--out", default="reports/field", metavar="DIR",
                    help="where to write field.md and field.json (default reports/field)")
    fd.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    fd.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="judge N projects at once, each in a process of its own (default: "
                         "the CPUs, at most 4; 1: one kernel after another in this process)")
    fd.set_defaults(func=_field)

    b = sub.add_parser("bench", help="print performance figures (oracle, backend, check, gpu)")
    b.add_argument("what", choices=("oracle", "backend", "check", "gpu", "cub", "bias",
                                        "compile", "workers", "triton"),
                   help="what to measure")
    b.add_argument("--cols", type=int, nargs="+", default=None,
                   help="widths (oracle, backend: 1024 4096; check: 4096)")
    b.add_argument("--rows", type=int, default=None,
                   help="check: rows of the long check (default 8191; built-in kernels 1023)")
    b.add_argument("--seed", type=int, default=0)
    b.set_defaults(func=_bench)
    for name in ("check", "report", "field", "bench", "replay", "agree"):
        sub.choices[name].add_argument(
            "-q", "--quiet", action="store_true",
            help="no progress on stderr (by default a step that takes over 2 s says what it "
                 "is doing: a live line on a terminal, a line every 5 s in a log)")
    return p


def _field(args) -> int:
    import json

    from normcheck.field import corpus, judge
    from normcheck.report import field as section
    from normcheck.report import folder

    c = corpus.load()
    picked = c.select(args.only)
    if args.list:
        for k in picked:
            s = c.sources[k.project]
            print(f"{k.name:32} {k.language:7} {s.project} {s.version} ({s.file}): "
                  f"{k.expect}{' (' + k.cause + ')' if k.cause else ''}")
        bases = {k.base or k.name for k in picked}  # a row name[fp16]: another format
        rows = f" ({len(picked)} rows with their other formats)" if len(bases) != len(picked) \
            else ""
        print(f"\n{len(bases)} kernels{rows} of {len({k.project for k in picked})} projects")
        return 0
    jobs = args.jobs if args.jobs is not None else min(os.cpu_count() or 1, 4)
    if jobs < 1:
        raise invalid("--jobs", jobs, "1 or more processes", "--jobs 1 judges one kernel "
                      "after another")
    outs = judge.judge_field(only=args.only, echo=lambda m: print(m, file=sys.stderr),
                             save_dir=Path(args.out) / "counterexamples", jobs=jobs)
    dicts = [o.as_dict() for o in outs]
    out = folder.prepare(args.out)
    folder.write(out / "field.json", folder.json_text(dicts, indent=1))
    folder.write(out / "field.md", f"# {section.TITLE}\n\n" + section.markdown(dicts))
    if args.json:
        print(json.dumps(dicts, indent=1, default=str))
    else:
        print(section.table(dicts) + "\n")
        print(section.summary_line(dicts) + f"; wrote {out / 'field.md'}, {out / 'field.json'}")
    if args.update:
        changed = corpus.record([o for o in outs if o.ran])
        print(f"recorded {len(changed)} changed verdicts in {corpus.CORPUS}" +
              (": " + ", ".join(changed) if changed else ""))
        return 0
    bad = [o for o in outs if not o.skipped and not o.matches]
    for o in bad:
        got = (f"{o.verdict}{' (' + o.cause + ')' if o.cause else ''}" if o.ran
               else f"not run: {o.error}")
        print(f"field: {o.name} ({o.project} {o.version}): {got}; recorded {o.expect}"
              f"{' (' + o.expect_cause + ')' if o.expect_cause else ''}", file=sys.stderr)
    return 1 if bad else 0


def _headers(args) -> int:
    from normcheck.backends import headers

    if args.action == "list":
        have = headers.fetched()
        for pkg, (names, what) in headers.LIBRARIES.items():
            where = have.get(pkg)
            print(f"{pkg:20} {what:10} {', '.join(names[:3])}"
                  f"{' ...' if len(names) > 3 else ''}\n{'':20} "
                  f"{'fetched: ' + str(where) if where else 'not fetched'}")
        extra = [str(d) for d in headers.library_include_dirs() if d not in have.values()]
        if extra:
            print(f"also searched: {', '.join(extra)}")
        return 0
    unknown = [p for p in args.packages if p not in headers.LIBRARIES]
    if unknown:
        raise invalid("PACKAGE", unknown[0], f"one of {', '.join(headers.LIBRARIES)}")
    for pkg in args.packages or list(headers.LIBRARIES):
        headers.fetch(pkg, echo=lambda m: print(m, file=sys.stderr))
    return 0


def _surface(args) -> int:
    from normcheck.backends.cpu import surface

    print(surface.table())
    if args.missing:
        for sec, c in surface.coverage().items():
            if c["missing"]:
                print(f"{sec}: {', '.join(c['missing'])}")
    return 0


def _bench(args) -> int:
    from normcheck import bench

    cols = tuple(args.cols or (1024, 4096))
    if args.rows is not None and args.rows < 1:
        raise invalid("--rows", args.rows, "at least 1")
    if args.what == "oracle":
        bench.oracle_benchmark(cols=cols, seed=args.seed)
    elif args.what == "backend":
        bench.backend_benchmark(cols=cols, seed=args.seed)
    elif args.what == "check":
        for c in (args.cols or (4096,)):
            bench.check_benchmark(rows=args.rows or 8191, cols=c,
                                  builtin_rows=args.rows or 1023)
    elif args.what == "cub":
        bench.cub_benchmark()
    elif args.what == "compile":
        bench.compile_benchmark()
    elif args.what == "workers":
        bench.workers_benchmark()
    elif args.what == "triton":
        bench.triton_benchmark(rows=args.rows or 2047, cols=(args.cols or (4096,))[0])
    elif args.what == "bias":
        bench.bias_benchmark(rows=args.rows or 1_000_000, cols=(args.cols or (256,))[0])
    else:
        from normcheck.report import gpu as gpu_section

        gpu_section.gpu_bandwidth(seed=args.seed)
    return 0


def _agree(args) -> int:
    from normcheck import agreement

    recs = agreement.compare_backends(fmad=args.fmad)
    bad = [r for r in recs if not r["agree"]]
    print(f"{len(recs) - len(bad)}/{len(recs)} kernels agree "
          f"({'--fmad=true: differences listed' if args.fmad else 'bit for bit, --fmad=false'})")
    return 1 if bad else 0


def _defines(items) -> dict:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        out[name] = value if eq else None
    return out


def _quant(text):
    """--quant: a preset name or KEY=VALUE,... (numbers as numbers)."""
    if text is None:
        return None
    if "=" not in text:
        return {"contract": text.strip()}
    out = {}
    for item in text.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise errors.invalid("--quant", text, "a preset or KEY=VALUE items separated by "
                                 "commas", "e.g. --quant contract=vllm,granularity=per_token")
        v = v.strip()
        for conv in (int, float):
            try:
                v = conv(v)
                break
            except ValueError:
                pass
        out[k.strip()] = v
    return out


def _long_progress(done, rows, rate):
    left = (rows - done) / rate if rate > 0 else float("inf")
    print(f"normcheck check: long run {done:,}/{rows:,} rows ({100 * done / rows:.0f}%), "
          f"{rate:,.0f} rows/s, ~{left:,.0f} s left", file=sys.stderr, flush=True)


def _check(args) -> int:
    from normcheck import check

    if args.explain:
        from normcheck.check.render import explain

        print(explain())
        return 0

    if args.source and args.source.endswith(".toml") and not args.spec:
        args.spec, args.source = args.source, None  # `normcheck check SPEC.toml`
    if args.source:
        _kernel_file(args.source)
    from normcheck import spec as specs

    dtypes = specs.parse_dtypes(args.dtypes, "--dtypes") if args.dtypes else None
    if args.op:
        if args.spec:
            raise invalid("--op", args.op, "no --spec with it (a spec names its op in [op])")
        args.spec, args.source = _op_spec(args), None
    result = check.run(check.CheckOptions.from_args(args, defines=_defines(args.defines),
                                                    quant=_quant(args.quant), dtypes=dtypes),
                       progress=_long_progress)
    _ci_files(args, result)
    print(result.to_json() if args.json else result.render())
    _github(args, result)
    return result.exit_code(strict=args.strict)


def _kernel_file(source: str) -> None:
    """A kernel file named on the command line, answered in one line before any compiler runs
    (#64: a missing path or a folder was compiled as CUDA C text, 9 s of g++ errors): it exists,
    is a file with a CUDA C or Python suffix, and holds something."""
    from normcheck.backends.cpu.backend import SOURCE_SUFFIXES

    p = Path(source)
    if not p.exists():
        raise invalid("source", source, "an existing kernel file (a .cu file, or a Triton "
                      ".py)", f"check the path (relative to {Path.cwd()})")
    if p.is_dir():
        raise invalid("source", source, "a kernel file, not a folder",
                      "name the .cu or .py file that holds the kernel")
    suffixes = sorted(SOURCE_SUFFIXES | {".py"})
    if p.suffix.lower() not in suffixes:
        raise invalid("source", source, "a CUDA C file (.cu, .cuh, .h ...) or a Triton .py",
                      "rename it, or pass a spec (.toml) naming it")
    if not p.is_file():  # a FIFO, a device: never opened here (it could block); the reading
        return           # of sources names what it is
    try:
        with open(p, "rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise invalid("source", source, "a readable file", e.strerror or str(e)) from None
    if not head.strip():
        raise invalid("source", source, "a file holding a kernel (it is empty)",
                      "name the file that defines your __global__ or @triton.jit kernel")


def _op_spec(args):
    """The spec of ``check --op``: a function of SOURCE, or MODULE:CALL of an installed
    module (found without importing it)."""
    from normcheck import spec as specs
    from normcheck.backends.triton.op import locate_module

    text, module, source, root = args.op.strip(), "", args.source, None
    head = text.split("(", 1)[0]
    if ":" in head:
        module, text = head.split(":", 1)[0].strip(), text.split(":", 1)[1].strip()
        if source:
            raise invalid("source", source, f"no file with --op {module}:... (the module's "
                          "own file is the source)")
        source, root = locate_module(module)
    elif not source:
        raise invalid("source", None, "the op's .py file (normcheck check FILE.py --op CALL), "
                      "or --op MODULE:CALL")
    if "(" not in text:
        raise invalid("--op", args.op, "a call such as \"rms_norm(x, weight, eps)\"")

    def where(v):
        return int(v) if v is not None and v.lstrip("-").isdigit() else v
    return specs.op_spec(text, source, module, root, where(args.op_output), where(args.op_h),
                         args.norm, args.dtype)


def _github(args, result):
    """--github: the annotations, after the verdict (on stderr when stdout is JSON)."""
    if not getattr(args, "github", False):
        return
    import json

    from normcheck import ci_formats

    d = json.loads(result.to_json())
    text = ci_formats.github_check(d, args.source or _spec_source(args.spec))
    (sys.stderr if args.json else sys.stdout).write(text)


def _spec_source(spec) -> str | None:
    """The kernel file a spec names (its annotations point there), or None."""
    if spec is None:
        return None
    from normcheck import spec as specs

    try:
        sp = spec if hasattr(spec, "source") else specs.load(spec)
    except NormcheckError:
        return None
    return str(sp.source) if getattr(sp, "source", None) else None


def _ci_files(args, result):
    """--junit and --summary of a check: written before the verdict is printed."""
    import json

    if not (args.junit or args.summary):
        return
    from normcheck import ci_formats

    d = json.loads(result.to_json())
    if args.junit:
        ci_formats.write(args.junit, ci_formats.check_junit(d))
    if args.summary:
        ci_formats.write(args.summary, ci_formats.check_summary(d))


def _cannot_judge(args, message: str, kind: str):
    """A check that cannot judge (exit 2) still writes what CI reads: ``--json`` prints
    {"verdict": "error", "error": ...}, ``--junit`` one errored test case, ``--summary`` what
    went wrong.  Never raises: the error itself is what the user must see."""
    if getattr(args, "func", None) is not _check:
        return
    from normcheck import ci_formats
    from normcheck.metrics import to_json

    what = args.entry or args.spec or args.source or "kernel"
    d = ci_formats.error_result(str(what), message, kind)
    try:
        if args.junit:
            ci_formats.write(args.junit, ci_formats.error_junit(d))
        if args.summary:
            ci_formats.write(args.summary, ci_formats.error_summary(d))
    except (OSError, NormcheckError) as e:
        print(f"normcheck: could not write the CI files: {e}", file=sys.stderr)
    if args.json:
        print(to_json(d))
    if getattr(args, "github", False):
        (sys.stderr if args.json else sys.stdout).write(ci_formats.github_check(d, args.source))


def _replay(args) -> int:
    from normcheck import replay

    case = args.case
    if case is None:
        saved = sorted(Path(".normcheck").glob("counterexample-*.npz"),
                       key=lambda p: p.stat().st_mtime)
        if not saved:
            raise invalid("case", None, "a case file: ./.normcheck/ holds none",
                          "run a check that fails first, or name the file")
        case = str(saved[-1])
        print(f"normcheck replay: the newest saved case, {case}", file=sys.stderr)
    out = replay.replay(case, backend=args.backend, variant=args.variant,
                        run_embedded=args.run_embedded_source)
    print(out)
    return out.exit_code


def _spec(args) -> int:
    from normcheck import skeleton
    from normcheck.backends import get_backend
    from normcheck.backends.triton.backend import is_triton, load, signature

    _kernel_file(args.source)
    # the source as the spec names it: relative to where the spec lands (-o), else to the
    # current folder, where a redirect (> my.toml) most likely puts it
    import os

    where = Path(args.output).resolve().parent if args.output else Path.cwd()
    named = Path(os.path.relpath(Path(args.source).resolve(), where)).as_posix()
    if is_triton(args.source):  # its parameters from its syntax tree: nothing of it runs
        _path, src_text, _cached = load(args.source)
        names, params = skeleton.triton_params(signature(src_text, args.entry,
                                                         _path.name))
        text, rows = skeleton.skeleton(args.source, args.entry, params, names=names,
                                       named=named)
    else:
        opts = {"arch": args.arch} if args.arch else None
        k = get_backend("cpu").compile_many(args.source, [args.entry],
                                            defines=_defines(args.defines), options=opts,
                                            include_dirs=tuple(args.include))[args.entry]
        text, rows = skeleton.skeleton(args.source, args.entry, k.params, named=named)
    if args.output:
        from normcheck.report import folder

        folder.write(Path(args.output), text)
    else:
        print(text, end="")
    print("normcheck spec: guessed " + "; ".join(
        f"{nm} -> {r if isinstance(r, str) else '+'.join(r)}" for nm, _p, r, _w in rows)
        + (f"; wrote {args.output} (source = \"{named}\")" if args.output else
           f"; source = \"{named}\" is relative to this folder (-o FILE names it relative to "
           "FILE's)"), file=sys.stderr)
    if named.startswith("../"):
        print(f"normcheck spec: the source lies outside the spec's folder: a spec names files "
              f"beneath its repository (the folder holding .git) or its own folder; check it "
              f"with -I {Path(args.source).resolve().parent} if it is outside both",
              file=sys.stderr)
    return 0


def _clean(args) -> int:
    from normcheck import cases

    n, size = cases.clean()
    print(f"removed {cases.WORK_FOLDER}/: {n} files, {size / 2**20:.1f} MiB" if n else
          f"nothing to remove ({cases.WORK_FOLDER}/ is not here)")
    return 0


def _cache(args) -> int:
    from normcheck.backends import cache

    root = cache.cache_root()
    if args.action == "clear":
        n = cache.cache_clear()
        print(f"removed {n} build(s) from {root}")
        return 0
    info = cache.cache_info()
    print(f"build cache: {root} (NORMCHECK_CACHE, else XDG_CACHE_HOME/normcheck, else "
          "~/.cache/normcheck)")
    for name, (count, size) in info.items():
        print(f"  {name:5} {count:5d} builds  {size / 2**20:8.1f} MiB")
    return 0


def _report(args) -> int:
    import time

    from normcheck.report import run_report

    if args.workers is not None and args.workers < 1:
        raise errors.invalid("--workers", args.workers, "at least 1")
    out = args.out or f"reports/{args.mode}"
    t = time.perf_counter()
    if args.strict and not (args.compare or args.spec):
        raise errors.invalid("--strict", True, "--spec (your kernels) or --compare OLD_DIR",
                             "name your kernels' specs, or the earlier report folder")
    done = run_report(args.mode, backend=args.backend, out=out, seed=args.seed,
                      kernels=args.kernels, workers=args.workers, cluster=args.cluster,
                      specs=args.spec, compare=args.compare, field=args.field)
    recs = done["results"]["records"]
    print(f"{len(recs)} records ({done['results'].get('measured_now', 0)} measured now) in "
          f"{time.perf_counter() - t:.0f} s; wrote " +
          ", ".join(str(p) for p in done["paths"].values()))
    from normcheck import ci_formats
    from normcheck.report import findings

    if args.junit:
        p = ci_formats.write(args.junit, ci_formats.report_junit(findings.findings(recs)))
        print(f"wrote {p}")
    if args.summary:
        p = ci_formats.write(args.summary, done["paths"]["summary.md"].read_text())
        print(f"wrote {p}")
    fs = findings.findings(recs)
    unsafe = sorted({f.kernel for f in fs if f.user and not f.safe})
    if args.github:
        sys.stdout.write(ci_formats.github_report(fs, out))
    d = done.get("diff")
    if d is not None:
        print(d.text())
        if args.strict and d.regressed:
            return 1
    if unsafe:
        print(f"unsafe kernels of yours: {', '.join(unsafe)}" +
              ("" if args.strict else " (--strict exits 1 on them)"))
        if args.strict:
            return 1
    return 0


def _diff(args) -> int:
    from normcheck import diff
    from normcheck.metrics import to_json

    d = diff.diff_paths(args.old, args.new)
    print(to_json(d.as_dict()) if args.json else d.text(show_same=args.all))
    return 1 if args.strict and d.regressed else 0


def _kernels(args) -> int:
    import json

    from normcheck import kernels

    vs = kernels.variants(kind=args.kind, language=None, norm=args.norm, storage=args.storage)
    if args.json:
        print(json.dumps([v.as_dict() for v in vs], indent=1))
        return 0
    cols = [c for c in kernels.Variant.__dataclass_fields__  # the fields some listed one has
            if any(getattr(v, c) not in (None, False) for v in vs)]
    table = [[str(getattr(v, c)) if getattr(v, c) is not None else "-" for c in cols] for v in vs]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for r in table:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)))
    print(f"\n{len(vs)} variant{'s' if len(vs) != 1 else ''}")
    return 0


def _on_term(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None) -> int:
    """The command line.  Everything it prints passes through normcheck.escape.TerminalStream:
    a kernel's text (its stderr, its crash report, a case's note) carries no terminal control
    sequence to the user's screen or CI log."""
    from normcheck.escape import TerminalStream

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalStream(out), TerminalStream(err)
    try:
        return _main(argv)
    finally:
        if isinstance(sys.stdout, TerminalStream):
            sys.stdout = out
        if isinstance(sys.stderr, TerminalStream):
            sys.stderr = err


def _main(argv=None) -> int:
    import os
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):  # no command: usage, and a usage error's exit
        parser.print_help(sys.stderr)
        return 2
    # SIGTERM ends the run like Ctrl-C: cleanups run, the worker's process group is killed
    try:
        signal.signal(signal.SIGTERM, _on_term)
    except ValueError:  # not the main thread
        pass
    if not getattr(args, "quiet", True):
        from normcheck import progress

        progress.enable(sys.stderr)
    if args.command in ("check", "report", "replay") and \
            "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        # the targeted search's files go beside the counterexamples, not in ./.hypothesis
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(".normcheck") / "hypothesis")
    try:
        return args.func(args)
    except NormcheckError as e:
        print(f"normcheck: error: {e}", file=sys.stderr)
        _cannot_judge(args, str(e), type(e).__name__)
        return 2
    except KeyboardInterrupt as e:
        result = getattr(e, "result", None)  # a check's later run: what ran, shown and saved
        if result is not None and getattr(args, "func", None) is _check:
            try:
                _ci_files(args, result)
                print(result.to_json() if args.json else result.render())
            except Exception:  # noqa: BLE001 -- the interrupt is what is said
                pass
            print(f"normcheck: interrupted during {result.interrupted}", file=sys.stderr)
            return result.exit_code(strict=getattr(args, "strict", False))
        print("normcheck: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as SIGPIPE would
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 141
    except SystemExit:
        raise
    except Exception as e:  # normcheck's own failure: never reported as the kernel's
        if os.environ.get("NORMCHECK_DEBUG"):
            raise
        print(f"normcheck: internal error: {type(e).__name__}: {e} (set NORMCHECK_DEBUG=1 for "
              "the traceback, and please report it)", file=sys.stderr)
        _cannot_judge(args, f"normcheck's own error: {type(e).__name__}: {e}", "internal")
        return 2
