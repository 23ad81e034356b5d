"""The `normcheck` command: argument parsing, exit codes, printing.

Exit codes: 0 success / pass, 1 a kernel failed its check, 2 cannot judge (bad arguments, compile
error, bad spec ...), 130 interrupted."""

from __future__ import annotations

import argparse
import sys

from normcheck import __version__
from normcheck.errors import NormcheckError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="normcheck",
        description="How many ULPs from the exact result is a LayerNorm/RMSNorm kernel, on which "
                    "rows, in which precision, and why.")
    p.add_argument("--version", action="version", version=f"normcheck {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    k = sub.add_parser("kernels", help="list the built-in kernels")
    k.add_argument("--json", action="store_true", help="machine-readable output")
    k.add_argument("--norm", choices=("layernorm", "rmsnorm", "gemma_rmsnorm", "add_layernorm",
                                      "add_rmsnorm"))
    k.add_argument("--storage", choices=("fp32", "fp16", "bf16"))
    k.set_defaults(func=_kernels)

    b = sub.add_parser("bench", help="print performance figures (oracle, backend)")
    b.add_argument("what", choices=("oracle", "backend"), help="what to measure")
    b.add_argument("--cols", type=int, nargs="+", default=[1024, 4096])
    b.add_argument("--seed", type=int, default=0)
    b.set_defaults(func=_bench)
    return p


def _bench(args) -> int:
    from normcheck import bench

    if args.what == "oracle":
        bench.oracle_benchmark(cols=tuple(args.cols), seed=args.seed)
    else:
        bench.backend_benchmark(cols=tuple(args.cols), seed=args.seed)
    return 0


def _kernels(args) -> int:
    import json

    from normcheck import kernels

    vs = kernels.variants(norm=args.norm, storage=args.storage)
    if args.json:
        print(json.dumps([v.as_dict() for v in vs], indent=1))
        return 0
    cols = ["name", "norm", "algorithm", "storage", "order", "convention", "fast_math", "source"]
    table = [[str(getattr(v, c)) if getattr(v, c) is not None else "-" for c in cols] for v in vs]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for r in table:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)))
    print(f"\n{len(vs)} variants")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except NormcheckError as e:
        print(f"normcheck: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("normcheck: interrupted", file=sys.stderr)
        return 130
