"""The CUDA device API the cpu backend presents, measured against what the CUDA headers declare.

The list comes from the headers of the nvidia-cuda-* wheels in use, never from a list of ours:

* the CUDA Math API by its documented sections (each function's doc comment names its group,
  ``\\ingroup CUDA_MATH_SINGLE``, ``CUDA_MATH_INTRINSIC_CAST``, ``CUDA_MATH__HALF_ARITHMETIC``
  ...: the groups of NVIDIA's Math API reference);
* the device functions outside the Math API, from the headers that declare them: warp
  functions (shuffle, vote, match, reduce), atomics, synchronization and fences, cache-hinted
  loads and stores, address spaces, clusters.

Each function's signatures are read from the headers preprocessed as nvcc's device pass sees them
(``__CUDACC__`` and ``__CUDA_ARCH__`` defined, so every ``#if`` is decided as on a GPU).  The
probe (:func:`coverage`) compiles, in the cpu backend's own translation-unit setting, one call of
every signature with default-valued arguments: a function is *implemented* when every one of its
signatures compiles.  What is left out on purpose is :data:`LEFT_OUT`, each with its reason.

``normcheck surface`` prints the table; ``tests/test_surface.py`` checks that every implemented
function computes its documented result.
"""

from __future__ import annotations

import functools
import os
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Section", "SECTIONS", "declared", "coverage", "table", "LEFT_OUT"]


@dataclass(frozen=True)
class Section:
    title: str
    groups: tuple = ()          # Math API doc groups
    headers: tuple = ()         # or: headers whose public device functions it holds
    names: str | None = None    # a regex the names of a header section match


SECTIONS = (
    Section("single-precision math", ("CUDA_MATH_SINGLE",)),
    Section("double-precision math", ("CUDA_MATH_DOUBLE",)),
    Section("integer math", ("CUDA_MATH_INT",)),
    Section("single-precision intrinsics", ("CUDA_MATH_INTRINSIC_SINGLE",)),
    Section("double-precision intrinsics", ("CUDA_MATH_INTRINSIC_DOUBLE",)),
    Section("integer intrinsics", ("CUDA_MATH_INTRINSIC_INT",)),
    Section("type casting intrinsics", ("CUDA_MATH_INTRINSIC_CAST",)),
    Section("SIMD intrinsics", ("CUDA_MATH_INTRINSIC_SIMD",)),
    Section("half precision", ("CUDA_MATH__HALF_ARITHMETIC", "CUDA_MATH__HALF2_ARITHMETIC",
                               "CUDA_MATH__HALF_COMPARISON", "CUDA_MATH__HALF2_COMPARISON",
                               "CUDA_MATH__HALF_FUNCTIONS", "CUDA_MATH__HALF2_FUNCTIONS",
                               "CUDA_MATH__HALF_MISC", "CUDA_MATH_INTRINSIC_HALF_CONSTANTS")),
    Section("bfloat16 precision", ("CUDA_MATH__BFLOAT16_ARITHMETIC",
                                   "CUDA_MATH__BFLOAT162_ARITHMETIC",
                                   "CUDA_MATH__BFLOAT16_COMPARISON",
                                   "CUDA_MATH__BFLOAT162_COMPARISON",
                                   "CUDA_MATH__BFLOAT16_FUNCTIONS",
                                   "CUDA_MATH__BFLOAT162_FUNCTIONS",
                                   "CUDA_MATH__BFLOAT16_MISC",
                                   "CUDA_MATH_INTRINSIC_BFLOAT16_CONSTANTS")),
    Section("fp8, fp6, fp4 conversions", ("CUDA_MATH_FP8_MISC", "CUDA_MATH_FP6_MISC",
                                          "CUDA_MATH_FP4_MISC")),
    Section("quad precision", ("CUDA_MATH_QUAD",)),
    Section("warp functions", headers=("sm_30_intrinsics.h", "crt/sm_70_rt.h",
                                       "crt/sm_80_rt.h", "sm_20_intrinsics.h",
                                       "crt/device_functions.h"),
            names=r"__shfl\w*|__ballot\w*|__all_sync|__any_sync|__activemask|__match_\w+|"
                  r"__reduce_\w+_sync|__syncwarp|__uni_sync|__fns|__all|__any|__ballot"),
    Section("atomics", headers=("device_atomic_functions.h", "sm_20_atomic_functions.h",
                                "sm_32_atomic_functions.h", "sm_60_atomic_functions.h",
                                "crt/sm_90_rt.h", "crt/sm_70_rt.h"),
            names=r"atomic\w+"),
    Section("synchronization and fences", headers=("crt/device_functions.h",
                                                   "sm_20_intrinsics.h", "sm_30_intrinsics.h",
                                                   "crt/sm_90_rt.h"),
            names=r"__syncthreads\w*|__threadfence\w*|__barrier_sync\w*|__nanosleep|__trap|"
                  r"__brkpt|clock|clock64|__prof_trigger"),
    Section("loads, stores and address spaces", headers=("sm_32_intrinsics.h",
                                                         "sm_20_intrinsics.h",
                                                         "crt/sm_90_rt.h"),
            names=r"__ld\w+|__st(?:cg|cs|wt|wb)|__is[A-Z]\w*|__cvta_\w+|__funnelshift\w*"),
    Section("clusters and grid dependencies", headers=("crt/sm_90_rt.h",),
            names=r"__cluster\w+|cudaGridDependencySynchronize|"
                  r"cudaTriggerProgrammaticLaunchCompletion"),
)

#: Left out on purpose: (a name, or a regex of names) -> why.
LEFT_OUT = {
    r"__nv_fp128_\w+": "quad precision (__float128) exists in device code from sm_100 only and "
                       "in no normalisation kernel",
    r"__cluster_map_shared_(?:rank|multicast)|__cluster_query_shared_rank":
        "distributed shared memory across the blocks of a cluster: the cpu backend runs "
        "clusters of one block",
}


def _left_out(name: str) -> str | None:
    for pat, why in LEFT_OUT.items():
        if re.fullmatch(pat, name):
            return why
    return None


# ------------------------------------------------------------------------------------------------
# What the headers declare
# ------------------------------------------------------------------------------------------------
_DOC = re.compile(r"/\*\*((?:(?!\*/).)*)\*/", re.S)


def _groups(inc: Path) -> dict:
    """{Math API group: {names}} from the doc comments of the headers in ``inc``: each comment's
    group, and the first function named after it (before the next comment)."""
    out = defaultdict(set)
    files = sorted([*inc.glob("*.h"), *inc.glob("*.hpp"), *(inc / "crt").glob("*.h"),
                    *(inc / "crt").glob("*.hpp")])
    for f in files:
        text = f.read_text(errors="replace")
        if "\\ingroup CUDA_MATH" not in text:
            continue
        docs = list(_DOC.finditer(text))
        for k, m in enumerate(docs):
            g = re.search(r"\\ingroup\s+(CUDA_MATH\w*)", m.group(1))
            if not g:
                continue
            end = docs[k + 1].start() if k + 1 < len(docs) else len(text)
            decl = "\n".join(ln for ln in text[m.end():end].splitlines()
                             if not ln.lstrip().startswith("#"))
            decl = re.split(r"[;{]", decl, maxsplit=1)[0]
            decl = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", decl)
            names = [n for n in re.findall(r"\b([A-Za-z_]\w*)\s*\(", decl)
                     if n not in ("__DEPRECATED__", "__CUDA_DEPRECATED", "__CUDA_ALIGN__",
                                  "defined", "__NV_SILENCE_DEPRECATION_BEGIN")]
            if names:
                out[g.group(1)].add(names[0])
    return out


def _strip_attributes(s: str) -> str:
    """``__attribute__((device))`` -> `` NCDEV ``; every other attribute removed."""
    out, i = [], 0
    while True:
        j = s.find("__attribute__", i)
        if j < 0:
            out.append(s[i:])
            break
        out.append(s[i:j])
        k = s.find("(", j)
        depth, p = 0, k
        while 0 <= p < len(s):
            if s[p] == "(":
                depth += 1
            elif s[p] == ")":
                depth -= 1
                if depth == 0:
                    break
            p += 1
        inner = s[k:p + 1]
        out.append(" NCDEV " if re.fullmatch(r"\(\(\s*device\s*\)\)", inner) else " ")
        i = p + 1
    return "".join(out)


_DECL = re.compile(r"NCDEV\b([^;{}()]*?)\b([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


def _signatures(inc: Path, cxx: str) -> dict:
    """{(header, name): {parameter lists}} of every device function, from the headers
    preprocessed as nvcc's device pass sees them."""
    from normcheck.backends import confine

    tu = "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + \
         "".join(f"#if __has_include(<{h}>)\n#include <{h}>\n#endif\n"
                 for h in ("cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h"))
    with confine.temporary_folder("pp") as d:
        path = Path(d) / "decls.cpp"
        path.write_text(tu)
        r = confine.run_compiler([cxx, "-std=c++17", "-E", "-D__CUDACC__", "-D__NVCC__",
                                  "-D__CUDA_ARCH__=900", "-D__CUDACC_VER_MAJOR__=13",
                                  "-D__CUDACC_VER_MINOR__=0", f"-isystem{inc}", str(path),
                                  "-o", "-"], "reading the CUDA headers' declarations",
                                 read=[*confine.toolchain_roots(cxx), str(inc)],
                                 write=[d, os.devnull], cleanup=d)
    text = r.stdout
    marks = list(re.finditer(r'^# \d+ "([^"]*)"[ \d]*$', text, re.M))
    parts = defaultdict(list)
    root = str(inc) + "/"
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        if m.group(1).startswith(root):
            parts[m.group(1)[len(root):].replace(".hpp", ".h")].append(text[m.end():end])
    sigs = defaultdict(set)
    for header, chunks in parts.items():
        for m in _DECL.finditer(_strip_attributes("".join(chunks))):
            sigs[(header, m.group(2))].add(" ".join(m.group(3).split()))
    return sigs


@functools.lru_cache(maxsize=None)
def declared() -> dict:
    """{section title: {name: [parameter lists]}} of the headers in use."""
    from normcheck.backends import cache
    from normcheck.backends.cpu import backend as cpu

    inc = Path(cpu.cuda_include_dirs()[0])
    cxx, _ = cache.cxx()
    groups = _groups(inc)
    sigs = _signatures(inc, cxx)
    by_name = defaultdict(set)
    for (header, name), ps in sigs.items():
        by_name[name] |= ps
    out = {}
    for sec in SECTIONS:
        names = {}
        if sec.groups:
            for g in sec.groups:
                for n in groups.get(g, ()):
                    names[n] = sorted(by_name.get(n, ()))
        else:
            pat = re.compile(sec.names)
            for (header, name), ps in sigs.items():
                if header in sec.headers and pat.fullmatch(name):
                    names[name] = sorted(set(names.get(name, [])) | ps)
        out[sec.title] = dict(sorted(names.items()))
    return out


# ------------------------------------------------------------------------------------------------
# What the cpu backend implements
# ------------------------------------------------------------------------------------------------
_GENERIC = re.compile(r"\b(T|T1|T2|_Tp|Tp|U|_Up)\b")
_KEEP_NAME = {"int", "float", "double", "char", "short", "long", "unsigned", "signed", "bool",
              "__half", "__half2", "__nv_bfloat16", "__nv_bfloat162", "size_t", "void"}


def _split(params: str) -> list:
    out, depth, cur = [], 0, ""
    for c in params:
        depth += c in "<(["
        depth -= c in ">)]"
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def _type(param: str) -> str | None:
    p = param.split("=")[0].strip()
    if p in ("", "void"):
        return None
    toks = re.findall(r"[A-Za-z_]\w*|\*|&|::|<|>|,|\d+", p)
    if len(toks) > 1 and re.fullmatch(r"[A-Za-z_]\w*", toks[-1]) and \
            toks[-1] not in _KEEP_NAME:
        toks = toks[:-1]
    t = " ".join(toks).replace(" *", "*").replace(" &", "&").replace(" :: ", "::")
    return _GENERIC.sub("float", t)


def _call(name: str, params: str, i: int) -> str:
    body, args = [], []
    for j, p in enumerate(_split(params)):
        t = _type(p)
        if t is None:
            continue
        if "*" in t:
            body.append(f"{t.replace('&', '')} a{j} = nullptr;")
        else:
            plain = re.sub(r"\bconst\b|&", "", t).strip()
            body.append(f"{plain} a{j}{{}};")
        args.append(f"a{j}")
    return f"void nc_probe_{i}() {{ {' '.join(body)} (void){name}({', '.join(args)}); }}"


@functools.lru_cache(maxsize=None)
def coverage() -> dict:
    """{section: {"implemented": [...], "missing": [...], "left_out": {name: why}}}: a name is
    implemented when a call of each of its signatures compiles on the cpu backend."""
    from normcheck.backends import base, cache, confine
    from normcheck.backends.cpu import backend as cpu

    decl = declared()
    probes, index = [], {}
    for sec, names in decl.items():
        for name, plist in names.items():
            if _left_out(name):
                continue
            for params in plist or [""]:
                index[len(probes)] = (sec, name)
                probes.append(_call(name, params, len(probes)) if plist else
                              f"void nc_probe_{len(probes)}() {{ (void)&{name}; }}")
    tu = '#include "normcheck_simt.h"\n' + "\n".join(probes) + "\n"
    cxx, _ = cache.cxx()
    incs = cpu.cuda_include_dirs()
    with confine.temporary_folder("pp") as d:
        path = Path(d) / "probe.cpp"
        path.write_text(tu)
        r = confine.run_compiler(
            [cxx, "-std=c++17", "-fsyntax-only", "-w", "-fmax-errors=0",
             *cpu.presentation(base.DEFAULT_ARCH, incs), f"-I{cpu.SHIM_DIR}",
             *[f"-isystem{i}" for i in incs], str(path)],
            "probing the cpu backend's CUDA device API",
            read=[*confine.toolchain_roots(cxx), str(cpu.SHIM_DIR), *map(str, incs)],
            write=[d, os.devnull], cleanup=d, diagnostics=64 << 20,
            limits=confine.Limits(8 << 30, 600, 64 << 20, 900.0, 1 << 20))
    failed = set()
    for m in re.finditer(r"probe\.cpp:(\d+):\d+: error", r.stderr):
        line = int(m.group(1)) - 2  # the first probe is on line 2
        if line in index:
            failed.add(index[line])
    out = {}
    for sec, names in decl.items():
        imp, miss, left = [], [], {}
        for name in names:
            why = _left_out(name)
            if why:
                left[name] = why
            elif (sec, name) in failed:
                miss.append(name)
            else:
                imp.append(name)
        out[sec] = {"implemented": imp, "missing": miss, "left_out": left}
    return out


def table() -> str:
    """The coverage table (markdown): implemented / listed per section, and what is missing."""
    cov = coverage()
    lines = ["| section | implemented / listed | left out (why) | missing |",
             "|---|---|---|---|"]
    tot_i = tot_n = 0
    for sec, c in cov.items():
        n = len(c["implemented"]) + len(c["missing"]) + len(c["left_out"])
        tot_i += len(c["implemented"])
        tot_n += n
        why = "; ".join(sorted(set(c["left_out"].values())))
        lines.append(f"| {sec} | {len(c['implemented'])} / {n} | "
                     f"{len(c['left_out'])}{' (' + why + ')' if why else ''} | "
                     f"{', '.join(c['missing'][:12])}{' ...' if len(c['missing']) > 12 else ''} |")
    lines.append(f"| **all** | **{tot_i} / {tot_n}** | | |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(table())
    print(json.dumps({k: v["missing"] for k, v in coverage().items()}, indent=1))
