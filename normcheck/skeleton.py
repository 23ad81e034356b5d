"""A spec to start from: ``normcheck spec FILE --entry NAME`` reads the kernel's parameters --
their types as the compiler sees them, their names from the source -- guesses each one's role
from its name and type, and prints a TOML spec saying what it guessed.

Guesses (the name lower-cased, the type as compiled):

============================== ==================================================================
a pointer named y, out, output, dst, result, normed ...         output (a const one: input)
x, input, inp, in, src, hidden ... (const)                      input; not const: input, output
                                                                (in place)
weight, gamma, g, w, scale when const and 1-D                   gamma
beta, bias, b                                                   beta
residual, res, skip (not const)                                 residual, h (in place)
mean, mu / rstd, invvar, inv_std, rsigma, inv_rms, s_variance    mean / rstd
a float named eps, epsilon                                      eps
an int named rows, n, m, tokens, num_tokens, batch, n_rows       rows
an int named cols, d, dim, hidden_size, n_cols, ncols, k         cols
an int named *stride*, *pitch*, ld*                             stride
anything else                                                   const, with a TODO
============================== ==================================================================

The norm is guessed from the roles (β: LayerNorm, a residual: the fused add), the storage
format from the pointers' element type (__half fp16, __nv_bfloat16 bf16, float fp32).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["kernel_names", "parameter_names", "parameter_lists", "guess_role", "skeleton"]

_OUT = {"y", "out", "output", "dst", "result", "res_out", "o", "normed", "normed_output", "out_ptr",
        "y_ptr", "output_ptr"}
_IN = {"x", "input", "inp", "in", "src", "hidden", "hidden_states", "x_ptr", "input_ptr", "a",
       "inputs"}
_GAMMA = {"gamma", "weight", "weights", "g", "w", "weight_ptr", "gamma_ptr", "w_ptr", "alpha",
          "scale", "scale_ptr"}
_BETA = {"beta", "bias", "b", "beta_ptr", "bias_ptr"}
_RES = {"residual", "res", "skip", "residual_ptr"}
_MEAN = {"mean", "mu", "means", "mean_ptr"}
_RSTD = {"rstd", "invvar", "inv_std", "rsigma", "inv_rms", "s_variance", "rstd_ptr", "inv_var",
         "invstd"}
_EPS = {"eps", "epsilon", "variance_epsilon"}
# M × N: M the rows, N the columns (mamba's, Triton's tutorials', FasterTransformer's n)
_ROWS = {"rows", "m", "tokens", "num_tokens", "batch", "n_rows", "nrows", "num_rows", "bs",
         "batch_size", "num_tokens_padded"}
_COLS = {"cols", "n", "d", "dim", "hidden", "hidden_size", "n_cols", "ncols", "k", "num_cols",
         "hidden_dim", "n_embd", "c", "feature_size", "normalized_shape", "num_features",
         "head_dim", "d_model"}
_ELEMENT = {"__half": "fp16", "half": "fp16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16",
            "float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "at::Half": "fp16",
            "at::BFloat16": "bf16", "cutlass::half_t": "fp16", "cutlass::bfloat16_t": "bf16",
            "nv_half": "fp16", "__nv_fp8_e4m3": "e4m3"}


def _balanced(text: str, i: int) -> int:
    """The index just past the parenthesis that closes the one at ``text[i]``."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def _split_params(inner: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def kernel_names(text: str) -> list[str]:
    """The names of the kernels declared in ``text`` -- a source, or the cpu backend's
    preprocessed text, where ``__global__`` is the marker ``__nc_global__`` -- comments and
    ``__launch_bounds__(...)`` aside, in order, each once; templates by their name."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    code = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", code)
    found = []
    for m in re.finditer(r"\b(?:__global__|__nc_global__)\b", code):
        depth, i = 0, m.end()  # the first name followed by "(" outside a template's <...>
        for t in re.finditer(r"[A-Za-z_]\w*(?=\s*\()|[<>;{}]", code[i:i + 600]):
            tok = t.group()
            if tok == "<":
                depth += 1
            elif tok == ">":
                depth = max(0, depth - 1)
            elif tok in ";{}":
                break
            elif depth == 0:
                found.append(tok)
                break
    return list(dict.fromkeys(found))


def parameter_names(text: str, entry: str) -> list[str] | None:
    """The names of the parameters of the kernel ``entry`` (its base name; a template's
    arguments are ignored) as declared in ``text`` -- "" for an unnamed one; None where no
    ``__global__`` definition of that name is found."""
    found = parameter_lists(text, entry, first=True)
    return found[0] if found else None


def parameter_lists(text: str, entry: str, first: bool = False) -> list[list[str]]:
    """The parameter names of every ``__global__`` declaration of ``entry`` in ``text`` (its
    overloads and specialisations), as :func:`parameter_names` reads one; ``first``: stop at
    the first."""
    out = []
    from normcheck.backends.base import entry_name

    base = entry_name(entry)
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    for m in re.finditer(rf"\b{re.escape(base)}\s*\(", code):
        head = code[max(0, m.start() - 400):m.start()]
        stmt = re.split(r"[;}]", head)[-1]
        if "__global__" not in stmt:
            continue
        end = _balanced(code, m.end() - 1)
        if end < 0:
            continue
        names = []
        for p in _split_params(code[m.end():end - 1]):
            p = p.split("=", 1)[0].strip()
            if p in ("", "void"):
                continue
            words = re.findall(r"[A-Za-z_]\w*", p)
            last = words[-1] if words else ""
            typeish = {"const", "float", "double", "int", "unsigned", "long", "short", "char",
                       "bool", "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "half",
                       "__half", "__nv_bfloat16", "__restrict__", "__restrict", "T", "scalar_t"}
            names.append("" if (last in typeish and len(words) == 1) or p.endswith("*")
                         else last)
        out.append(names)
        if first:
            break
    return out


def guess_role(name: str, param, triton: bool = False) -> tuple[str | list, str]:
    """(role, why) for one parameter: its name (lower case) and its compiled type (a Triton
    kernel's: what :func:`triton_params` makes of its name)."""
    n = name.lower()
    const = param.ctype.replace(" ", "").startswith("const")
    if param.is_pointer:
        if n in _OUT:
            return ("input", f"named {name!r} but const") if const else \
                ("output", f"named {name!r}")
        if n in _IN:
            return ("input", f"named {name!r}, const") if const else \
                (["input", "output"], f"named {name!r} and written: in place")
        if n in _GAMMA:
            return "gamma", f"named {name!r}"
        if n in _BETA:
            return "beta", f"named {name!r}"
        if n in _RES:
            return ("residual", f"named {name!r}, const") if const else \
                (["residual", "h"], f"named {name!r} and written: the fused sum in place")
        if n in _MEAN:
            return "mean", f"named {name!r}"
        if n in _RSTD:
            return "rstd", f"named {name!r}"
        if "res" in n and "out" in n:
            return "h", f"named {name!r}: the fused sum, written"
        if triton:
            return "null", ("not recognised: passed as a null pointer (TODO: its role, if the "
                            "kernel uses it)")
        return ("input", "a const pointer: read") if const else \
            ("output", "a pointer not const: written")
    if n in _EPS or (param.base in ("float", "double") and "eps" in n):
        return "eps", f"named {name!r}"
    if n in _ROWS:
        return "rows", f"named {name!r}"
    if n in _COLS:
        return "cols", f"named {name!r}"
    if "stride" in n or "pitch" in n or n.startswith("ld"):
        return "stride", f"named {name!r}: a row pitch"
    if param.base in ("float", "double"):
        return "eps", "the only float scalars of a norm are ε (check it)"
    return "const", "not recognised: give its value"


def stride_of(name: str) -> str | None:
    """The row buffer a stride's name says it is the pitch of (``X_row_stride``,
    ``stride_y_row``, ``input_stride``), or None."""
    for tok in name.lower().replace("_ptr", "").split("_"):
        for names, role in ((_OUT, "output"), (_IN, "input"), (_RES, "residual")):
            if tok in names and tok not in ("a", "n", "in", "o"):
                return role
    return None


def triton_params(sig) -> tuple[list, list]:
    """(names, Params) of a Triton kernel's signature (normcheck.backends.triton.backend.
    Signature), typed as the roles read them: Triton declares no types, so a name a norm's
    pointer goes by (``X``, ``W_ptr``, ``Y`` ...) is a pointer -- read (const) unless it names
    an output -- a constexpr is a const, ``eps`` a float, the rest int."""
    from normcheck.backends.base import Param

    names, params = [], []
    reads = _IN | _GAMMA | _BETA | _RES
    for nm in sig.passed:
        n = nm.lower()
        stem = n[:-4] if n.endswith("_ptr") else n
        if nm in sig.constexprs:
            t = "constexpr"
        elif stem in reads or n in reads:
            t = "const T*"
        elif stem in _OUT | _MEAN | _RSTD or n in _OUT | _MEAN | _RSTD:
            t = "T*"
        elif n in _EPS or "eps" in n:
            t = "float"
        elif n in _ROWS or n in _COLS or "stride" in n:
            t = "int"
        elif nm.isupper() or n.endswith("_ptr") or stem in _RES:
            t = "T*"  # Triton's convention: pointers in capitals (RESIDUAL_OUT, ROWSCALE)
        else:
            t = "int"
        names.append(nm)
        params.append(Param(t, 8, 0))
    return names, params


def skeleton(source, entry: str, params, text: str | None = None,
             names: list | None = None, named: str | None = None) -> tuple[str, list]:
    """(the TOML spec, [(parameter, role, why)]) for ``entry`` of ``source`` whose compiled
    parameters are ``params`` (normcheck.backends.base.Param; a Triton kernel's:
    :func:`triton_params`, with their ``names``); ``named``: the source as the spec names it
    (relative to where the spec lands; its file name by default)."""
    triton = names is not None
    if names is None:
        if text is None:
            text = Path(source).read_text(errors="replace")
        names = parameter_names(text, entry) or []
    names = list(names) + [""] * (len(params) - len(names))
    rows = []
    for i, (nm, p) in enumerate(zip(names, params)):
        if p.ctype == "constexpr":
            role, why = "const", "a tl.constexpr" + (": a block size" if "BLOCK" in nm.upper()
                                                     else ": give its value")
        else:
            role, why = guess_role(nm or f"arg{i}", p, triton)
        rows.append((nm or f"arg{i}", p, role, why))
    roles = {r for _, _, role, _ in rows for r in (role if isinstance(role, list) else [role])}
    norm = ("add_" if "residual" in roles else "") + ("layernorm" if "beta" in roles
                                                       else "rmsnorm")
    elems = [_ELEMENT.get(p.base) for _, p, role, _ in rows if p.is_pointer and
             (role == "input" or (isinstance(role, list) and "input" in role))]
    dtype = next((e for e in elems if e), None)
    lines = [f"# a spec for {entry} of {Path(str(source)).name}, written by `normcheck spec`:",
             "# every role below is a guess from the parameter's name and type -- check each,",
             "# then run: normcheck check --spec THIS_FILE",
             f'source = "{named or Path(str(source)).name}"',
             f'entry = "{entry}"',
             f'norm = "{norm}"                # guessed: ' +
             ("β present" if "beta" in roles else "no β") +
             ("; a residual: the fused add" if "residual" in roles else ""),
             f'dtype = "{dtype or "fp16"}"' + ("" if dtype else
                                                 "                  # TODO: the storage format"),
             "", "[launch]",
             'grid = "rows"                 # TODO: one ' + ("program" if triton else "block") +
             ' a row? (an expression of rows, cols)',
             'num_warps = "4"               # TODO: the warps your launcher passes' if triton else
             'block = "256"                 # TODO: the block your launcher uses', ""]
    for nm, p, role, why in rows:
        lines.append("[[args]]")
        r = f'["{role[0]}", "{role[1]}"]' if isinstance(role, list) else f'"{role}"'
        ctype = p.ctype
        if triton:  # Triton declares no types: a pointer is neither const nor not
            ctype = "pointer" if p.is_pointer else p.ctype
            why = why.replace(", const", "")
        lines.append(f"role = {r}".ljust(30) + f"# {ctype} {nm}: {why}")
        if role != "const" and nm and not nm.startswith("arg"):
            lines.append(f'name = "{nm}"')
        if role == "const":
            if p.ctype == "constexpr" and "BLOCK" in nm.upper():
                lines.append('value = "next_pow2(cols)"     # the row in one block (check it)')
            else:
                lines.append('value = "0"                   # TODO: its value (an expression)')
            lines.append(f'name = "{nm}"')
        if role == "stride":
            of = stride_of(nm)
            lines.append(f'of = ["{of}"]'.ljust(30) + f"# named for {of}" if of else
                         'of = ["input", "output"]      # TODO: the buffers it is the pitch of')
        if not p.is_pointer and role in ("rows", "cols", "const", "stride") and \
                p.base not in ("int", "int32_t"):
            t = {"long": "int64", "long int": "int64", "int64_t": "int64", "long long": "int64",
                 "long long int": "int64", "size_t": "uint64", "unsigned int": "uint32",
                 "uint32_t": "uint32", "unsigned": "uint32", "uint64_t": "uint64",
                 "unsigned long": "uint64", "long unsigned int": "uint64",
                 "unsigned long int": "uint64"}.get(p.base)
            if t:
                lines.append(f'type = "{t}"')
    return "\n".join(lines) + "\n", rows
