"""Inline PTX on the cpu backend: each ``asm`` statement translated to C++, from a table.

A GPU kernel's ``asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));`` becomes a
block of C++ that computes the same thing with the SIMT shim: every operand and every ``.reg``
the PTX declares is a 64-bit slot of bits (``::ncsimt::ptx::reg``), each instruction reads its
operands as its type suffix says (``.f32``, ``.u32``, ``.f16x2`` ...) and writes its result
back as bits, and the outputs are copied into the C++ lvalues of the constraint list.

:data:`INSTRUCTIONS` is the table (opcode -> what it does); anything else is a compile error
naming the instruction and its line.  Approximate instructions (``rsqrt.approx``, ``ex2.approx``,
``rcp.approx`` ...) are evaluated accurately (correctly rounded where libm is): the cpu backend
records this in its provenance (``CPU_VS_GPU``).  Loads and stores keep their cache hints as
plain accesses, so guard pages still catch them, and check the vector alignment a GPU demands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from normcheck.errors import CompileError

__all__ = ["translate_statement", "INSTRUCTIONS", "PtxError"]


class PtxError(CompileError):
    """Inline PTX the cpu backend cannot translate."""


# ------------------------------------------------------------------------------------------------
# The asm statement: template, operands
# ------------------------------------------------------------------------------------------------
@dataclass
class Operand:
    constraint: str   # without the = / + / & modifiers
    expr: str
    output: bool
    inout: bool
    name: str | None = None

    @property
    def kind(self) -> str:
        c = self.constraint
        for k in "hrlfdn":
            if k in c:
                return k
        if "i" in c:
            return "n"
        return c


_STR = re.compile(r'(?:u8|u|U|L)?"((?:\\.|[^"\\])*)"', re.S)
_ESC = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0", "a": "\a",
        "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def _unescape(s: str) -> str:
    def rep(m):
        c = m.group(1)
        if c[0] in "01234567" and len(c) > 1:
            return chr(int(c, 8))
        if c[0] == "x":
            return chr(int(c[1:], 16))
        return _ESC.get(c, c)

    return re.sub(r"\\(x[0-9a-fA-F]+|[0-7]{1,3}|.)", rep, s)


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside parentheses, brackets, braces and literals."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            m = re.compile(r'"(?:\\.|[^"\\])*"' if c == '"' else r"'(?:\\.|[^'\\])*'",
                           re.S).match(text, i)
            j = m.end() if m else i + 1
            cur.append(text[i:j])
            i = j
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _parse_operands(text: str, output: bool, where: str) -> list[Operand]:
    out = []
    if not text.strip():
        return out
    for part in _split_top(text, ","):
        m = re.match(r'\s*(?:\[\s*(\w+)\s*\])?\s*"([^"]*)"\s*\((.*)\)\s*$', part, re.S)
        if not m:
            raise PtxError(f"{where}: cannot read the asm operand {part.strip()!r}")
        cons = m.group(2)
        out.append(Operand(re.sub(r"[=+&%]", "", cons), m.group(3).strip(), output,
                           "+" in cons, m.group(1)))
    return out


def _statement(body: str, where: str):
    parts = _split_top(body, ":")
    if len(parts) > 4:
        raise PtxError(f"{where}: asm goto (labels) is not supported on the cpu backend")
    template = "".join(_unescape(m.group(1)) for m in _STR.finditer(parts[0]))
    if _STR.sub("", parts[0]).strip():
        raise PtxError(f"{where}: the asm template must be string literals")
    outs = _parse_operands(parts[1], True, where) if len(parts) > 1 else []
    ins = _parse_operands(parts[2], False, where) if len(parts) > 2 else []
    return template, outs + ins, len(parts) > 1


# ------------------------------------------------------------------------------------------------
# PTX text: instructions
# ------------------------------------------------------------------------------------------------
@dataclass
class Instr:
    guard: str | None          # predicate name (or None)
    negate: bool
    op: str                    # e.g. "shfl"
    mods: list                 # e.g. ["sync", "down", "b32"]
    args: list                 # operand strings
    text: str


def _substitute(template: str, ops: list[Operand], extended: bool, where: str) -> str:
    if not extended:
        return template
    names = {o.name: i for i, o in enumerate(ops) if o.name}

    def rep(m):
        t = m.group(0)
        if t == "%%":
            return "%"
        key = m.group(1) or m.group(2)
        i = int(key) if key.isdigit() else names.get(key)
        if i is None or i >= len(ops):
            raise PtxError(f"{where}: the asm template refers to {t}, which is not an operand")
        return f"\x01{i}\x01"

    return re.sub(r"%%|%(\d+)|%\[(\w+)\]", rep, template)


def _instructions(text: str, where: str) -> list[Instr]:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for raw in text.split(";"):
        # scope braces open or close a statement; braces inside one are a vector operand
        s = raw.strip()
        while s[:1] in ("{", "}") and s:
            s = s[1:].strip()
        while s.endswith("}") and s.count("{") < s.count("}"):
            s = s[:-1].strip()
        if not s:
            continue
        m = re.match(r"\.reg\s+\.(\w+)\s+(.*)$", s, re.S)
        if m:
            out.append(Instr(None, False, ".reg", [m.group(1)],
                             [a.strip() for a in m.group(2).split(",")], s))
            continue
        if re.match(r"\.\w+", s):
            raise PtxError(f"{where}: the PTX directive {s.split()[0]} is not supported")
        if re.match(r"[A-Za-z_$]\w*:", s):
            raise PtxError(f"{where}: PTX labels and branches are not supported ({s!r})")
        guard, neg = None, False
        m = re.match(r"@(!?)([%\w$.\x01]+)\s+(.*)$", s, re.S)
        if m:
            neg, guard, s = m.group(1) == "!", m.group(2), m.group(3).strip()
        m = re.match(r"([A-Za-z_.:\d]+)\s*(.*)$", s, re.S)
        if not m:
            raise PtxError(f"{where}: cannot read the PTX instruction {raw.strip()!r}")
        opcode, rest = m.group(1), m.group(2).strip()
        head, *mods = opcode.split(".")
        args = [a.strip() for a in _split_top(rest, ",")] if rest else []
        out.append(Instr(guard, neg, head, mods, args, s.replace("\x01", "%")))
    return out


# ------------------------------------------------------------------------------------------------
# Code generation
# ------------------------------------------------------------------------------------------------
_FLOAT_TYPES = {"f32": "float", "f64": "double"}
_INT_TYPES = {"u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
              "s8": "int8_t", "s16": "int16_t", "s32": "int32_t", "s64": "int64_t",
              "b8": "uint8_t", "b16": "uint16_t", "b32": "uint32_t", "b64": "uint64_t"}
_HALF_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f16x2": "__half2",
               "bf16x2": "__nv_bfloat162"}
_ALL_TYPES = {**_FLOAT_TYPES, **_INT_TYPES, **_HALF_TYPES, "pred": "bool"}
_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_SREGS = {"laneid": "::ncsimt::ptx::laneid()", "warpid": "::ncsimt::ptx::warpid()",
          "nwarpid": "48u", "warpsz": "32u",
          "lanemask_eq": "::ncsimt::ptx::lanemask(0)", "lanemask_le": "::ncsimt::ptx::lanemask(1)",
          "lanemask_lt": "::ncsimt::ptx::lanemask(2)", "lanemask_ge": "::ncsimt::ptx::lanemask(3)",
          "lanemask_gt": "::ncsimt::ptx::lanemask(4)",
          "clock": "(uint32_t)clock64()", "clock64": "(uint64_t)clock64()",
          "globaltimer": "(uint64_t)clock64()"}
# (what threadIdx & co. expand to: the translation happens after the preprocessor)
for _d in "xyz":
    _SREGS[f"tid.{_d}"] = f"(::threadIdx.{_d})"
    _SREGS[f"ntid.{_d}"] = f"(::blockDim.{_d})"
    _SREGS[f"ctaid.{_d}"] = f"(::blockIdx.{_d})"
    _SREGS[f"nctaid.{_d}"] = f"(::gridDim.{_d})"
    _SREGS[f"clusterid.{_d}"] = f"(::blockIdx.{_d})"
    _SREGS[f"nclusterid.{_d}"] = f"(::gridDim.{_d})"
    _SREGS[f"cluster_ctaid.{_d}"] = "0u"
    _SREGS[f"cluster_nctaid.{_d}"] = "1u"
_SREGS.update({"cluster_ctarank": "0u", "cluster_nctarank": "1u", "is_explicit_cluster": "0u",
               "smid": "0u", "nsmid": "132u", "gridid": "0ull", "dynamic_smem_size":
               "(uint32_t)::ncsimt::tls_dyn_smem_size", "total_smem_size":
               "(uint32_t)::ncsimt::tls_dyn_smem_size"})


def _type_of(mods, where, instr, n=1):
    """The last ``n`` type suffixes of an instruction (PTX puts them last)."""
    ts = [m for m in mods if m in _ALL_TYPES]
    if len(ts) < n:
        raise PtxError(f"{where}: `{instr.text}`: expected a type suffix (.f32, .u32 ...)")
    return ts[-n:] if n > 1 else ts[-1]


class _Gen:
    def __init__(self, ops: list[Operand], where: str):
        self.ops = ops
        self.where = where
        self.locals = {}     # PTX name -> C++ name
        self.preds = {}      # PTX predicate name -> C++ bool
        self.lines = []
        self.instr = None

    def fail(self, why):
        raise PtxError(f"{self.where}: `{self.instr.text}`: {why}")

    # registers -----------------------------------------------------------------------------
    def declare(self, ins: Instr):
        typ = ins.mods[0]
        if typ not in _ALL_TYPES:
            self.fail(f"registers of type .{typ} are not supported")
        for name in ins.args:
            m = re.match(r"^([%\w$]+)<(\d+)>$", name)
            names = [f"{m.group(1)}{k}" for k in range(int(m.group(2)))] if m else [name]
            for nm in names:
                if not re.fullmatch(r"[%\w$]+", nm):
                    self.fail(f"cannot read the register name `{nm}`")
                c = "__nc_l" + re.sub(r"\W", lambda mm: f"_{ord(mm.group(0)):x}_", nm)
                if typ == "pred":
                    self.preds[nm] = c
                    self.lines.append(f"bool {c} = false;")
                else:
                    self.locals[nm] = c
                    self.lines.append(f"::ncsimt::ptx::reg {c} = 0;")

    def slot(self, a: str) -> str | None:
        m = re.fullmatch(r"\x01(\d+)\x01", a)
        if m:
            return f"__nc_o{m.group(1)}"
        return self.locals.get(a)

    def pred(self, a: str) -> str:
        a = a.strip()
        neg = a.startswith("!")
        a = a.lstrip("!")
        if a in self.preds:
            return ("!" if neg else "") + self.preds[a]
        self.fail(f"`{a}` is not a predicate register")

    # values ----------------------------------------------------------------------------------
    def val(self, a: str, t: str) -> str:
        """C++ expression of operand ``a`` read as PTX type ``t``."""
        a = a.strip()
        s = self.slot(a)
        if s is not None:
            return f"::ncsimt::ptx::get_{t}({s})"
        if a.startswith("%"):
            sr = _SREGS.get(a[1:])
            if sr is None:
                self.fail(f"special register {a} is not supported")
            return f"(({_ALL_TYPES[t]})({sr}))" if t in _INT_TYPES else sr
        if a in self.preds:
            return f"({self.preds[a]} ? 1u : 0u)"
        m = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", a)
        if m:
            v = f"__uint_as_float(0x{m.group(1)}u)"
            return v if t == "f32" else f"(({_ALL_TYPES.get(t, 'float')}){v})"
        m = re.fullmatch(r"0[dD]([0-9a-fA-F]{16})", a)
        if m:
            return f"__longlong_as_double(0x{m.group(1)}ll)"
        if re.fullmatch(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uU]?", a):
            lit = a.rstrip("uU")
            if lit.lower().startswith(("0b", "-0b", "+0b")):
                lit = str(int(lit, 2))
            return f"(({_ALL_TYPES.get(t, 'uint32_t')})({lit}ll))"
        if re.fullmatch(r"[-+]?\d+\.\d*(?:[eE][-+]?\d+)?|[-+]?\d*\.\d+(?:[eE][-+]?\d+)?", a):
            return f"(({_ALL_TYPES.get(t, 'double')})({a}))"
        self.fail(f"cannot read the operand `{a}`")

    def put(self, d: str, t: str, expr: str) -> str:
        d = d.strip()
        if d == "_":
            return f"(void)({expr});"
        if t == "pred" or d in self.preds:
            return f"{self.pred(d)} = ({expr});"
        s = self.slot(d)
        if s is None:
            self.fail(f"cannot write to `{d}`")
        return f"{s} = ::ncsimt::ptx::set_{t}({expr});"

    def addr(self, a: str) -> str:
        m = re.fullmatch(r"\[\s*([^\]+\-]+?)\s*(?:([+-])\s*(\w+))?\s*\]", a.strip())
        if not m:
            self.fail(f"cannot read the address `{a}`")
        base = self.val(m.group(1), "u64")
        if m.group(2):
            return f"({base} {m.group(2)} (uint64_t)({int(m.group(3), 0)}ll))"
        return base

    def vec(self, a: str) -> list[str]:
        a = a.strip()
        if a.startswith("{") and a.endswith("}"):
            return [x.strip() for x in a[1:-1].split(",")]
        return [a]

    # emission ----------------------------------------------------------------------------------
    def emit(self, ins: Instr):
        self.instr = ins
        if ins.op == ".reg":
            self.declare(ins)
            return
        if ins.op.startswith("."):
            self.fail(f"the directive {ins.op} is not supported")
        h = INSTRUCTIONS.get(ins.op)
        if h is None:
            raise PtxError(f"{self.where}: inline PTX instruction `{ins.op}"
                           f"{''.join('.' + m for m in ins.mods)}` (in `{ins.text}`) has no "
                           "translation on the cpu backend; supported: "
                           + ", ".join(sorted(INSTRUCTIONS)) + " (normcheck.backends.cpu.ptx)")
        code = h(self, ins)
        if ins.guard:
            g = self.pred(("!" if ins.negate else "") + ins.guard)
            code = f"if ({g}) {{ {code} }}"
        self.lines.append(code)


def _nargs(g, ins, n):
    if len(ins.args) != n:
        g.fail(f"expected {n} operands, got {len(ins.args)}")


def _mov(g: _Gen, ins: Instr) -> str:
    _nargs(g, ins, 2)
    t = _type_of(ins.mods, g.where, ins)
    d, a = ins.args
    if d.startswith("{"):  # unpack
        parts = g.vec(d)
        w = {"b64": 64, "b32": 32, "u64": 64, "u32": 32, "b16": 16, "u16": 16}.get(t)
        if not w:
            g.fail("unpacking needs .b16, .b32 or .b64")
        piece = w // len(parts)
        src = g.val(a, {64: "b64", 32: "b32", 16: "b16"}[w])
        pt = {8: "b8", 16: "b16", 32: "b32"}[piece]
        return " ".join(g.put(p, pt, f"({src} >> {piece * k})") for k, p in enumerate(parts))
    if a.startswith("{"):  # pack
        parts = g.vec(a)
        w = {"b64": 64, "b32": 32, "u64": 64, "u32": 32, "b16": 16, "u16": 16}.get(t)
        if not w:
            g.fail("packing needs .b16, .b32 or .b64")
        piece = w // len(parts)
        pt = {8: "b8", 16: "b16", 32: "b32"}[piece]
        acc = " | ".join(f"((uint64_t){g.val(p, pt)} << {piece * k})"
                         for k, p in enumerate(parts))
        return g.put(d, {64: "b64", 32: "b32", 16: "b16"}[w], f"({acc})")
    return g.put(d, t, g.val(a, t))


def _float_math(fn):
    """An instruction on .f32/.f64 (and .ftz): ``fn(g, t, values) -> expression``."""
    def h(g: _Gen, ins: Instr) -> str:
        t = _type_of(ins.mods, g.where, ins)
        rnd = [m for m in ins.mods if m in ("rz", "rm", "rp")]
        if rnd:
            g.fail(f"rounding mode .{rnd[0]} is not supported (only .rn)")
        if "sat" in ins.mods or "cc" in ins.mods:
            g.fail(f".{'sat' if 'sat' in ins.mods else 'cc'} is not supported")
        vals = [g.val(a, t) for a in ins.args[1:]]
        if t in _FLOAT_TYPES:
            ftz = "ftz" in ins.mods and t == "f32"
            if ftz:
                vals = [f"::ncsimt::ptx::ftz({v})" for v in vals]
            e = fn(g, t, vals, ins)
            if ftz:
                e = f"::ncsimt::ptx::ftz({e})"
            return g.put(ins.args[0], t, e)
        if t in _HALF_TYPES:
            return g.put(ins.args[0], t, fn(g, t, vals, ins))
        if t in _INT_TYPES:
            return g.put(ins.args[0], t, fn(g, t, vals, ins))
        g.fail(f"type .{t} is not supported")
    return h


_HALF_FN = {  # (scalar, pair) functions of cuda_fp16.h / cuda_bf16.h
    "add": ("__hadd", "__hadd2"), "sub": ("__hsub", "__hsub2"), "mul": ("__hmul", "__hmul2"),
    "fma": ("__hfma", "__hfma2"), "neg": ("__hneg", "__hneg2"), "abs": ("__habs", "__habs2"),
    "min": ("__hmin", "__hmin2"), "max": ("__hmax", "__hmax2"), "ex2": ("hexp2", "h2exp2"),
}


def _binary(op):
    def fn(g, t, v, ins):
        if t in _HALF_TYPES:
            f = _HALF_FN[ins.op][t.endswith("x2")]
            return f"{f}({', '.join(v)})"
        if ins.op == "mul" and t in _INT_TYPES:
            w = [m for m in ins.mods if m in ("lo", "hi", "wide")]
            if w and w[0] != "lo":
                g.fail(f"mul.{w[0]} is not supported")
        if len(v) != 2:
            g.fail("expected two source operands")
        if op in ("min", "max"):
            if t in _FLOAT_TYPES:
                return f"::ncsimt::ptx::f{op}({v[0]}, {v[1]})"
            return f"(({v[0]}) {'<' if op == 'min' else '>'} ({v[1]}) ? ({v[0]}) : ({v[1]}))"
        return f"(({v[0]}) {op} ({v[1]}))"
    return _float_math(fn)


def _unary(expr_f32, expr_f64=None, half=None):
    def fn(g, t, v, ins):
        if len(v) != 1:
            g.fail("expected one source operand")
        if t in _HALF_TYPES:
            f = _HALF_FN.get(half or ins.op)
            if not f:
                g.fail(f".{t} is not supported for {ins.op}")
            return f"{f[t.endswith('x2')]}({v[0]})"
        if t == "f64":
            if not expr_f64:
                g.fail(".f64 is not supported")
            return expr_f64.format(v[0])
        if t == "f32":
            return expr_f32.format(v[0])
        if ins.op in ("neg", "abs") and t in _INT_TYPES:
            return f"({'-' if ins.op == 'neg' else '::ncsimt::ptx::iabs'}({v[0]}))"
        g.fail(f"type .{t} is not supported")
    return _float_math(fn)


def _fma(g, t, v, ins):
    if len(v) != 3:
        g.fail("expected three source operands")
    if t in _HALF_TYPES:
        return f"{_HALF_FN['fma'][t.endswith('x2')]}({v[0]}, {v[1]}, {v[2]})"
    if t in _INT_TYPES:  # mad.lo
        return f"(({v[0]}) * ({v[1]}) + ({v[2]}))"
    return f"{'fmaf' if t == 'f32' else 'fma'}({v[0]}, {v[1]}, {v[2]})"


def _div(g, t, v, ins):
    if len(v) != 2:
        g.fail("expected two source operands")
    return f"(({v[0]}) / ({v[1]}))"


#: cvt to the packed quantised formats (PTX ISA 8.6+): destination register type, and the
#: cuda_fp8.h / cuda_fp4.h conversion of a float2 whose .x is the second source (the low part).
_CVT_PACKED = {
    "e4m3x2": ("b16", "__nv_cvt_float2_to_fp8x2(make_float2({b}, {a}), {sat}, __NV_E4M3)"),
    "e5m2x2": ("b16", "__nv_cvt_float2_to_fp8x2(make_float2({b}, {a}), {sat}, __NV_E5M2)"),
    "e2m1x2": ("b8", "__nv_cvt_float2_to_fp4x2(make_float2({b}, {a}), __NV_E2M1, "
                     "cudaRoundNearest)"),
    "ue8m0x2": ("b16", "__nv_cvt_float2_to_e8m0x2(make_float2({b}, {a}), {sat}, {rnd})"),
}


def _cvt_packed(g: _Gen, ins: Instr, dt: str) -> str:
    """cvt.rn.satfinite.{e4m3x2,e5m2x2,e2m1x2}.f32 and cvt.{rz,rp}[.satfinite].ue8m0x2.f32: d,
    a, b with a in the upper half."""
    st = [m for m in ins.mods if m in _ALL_TYPES]
    if st != ["f32"]:
        g.fail(f"cvt.{dt} from .{st[0] if st else '?'} is not supported (only .f32 pairs)")
    _nargs(g, ins, 3)
    rnd = [m for m in ins.mods if m in ("rn", "rz", "rp", "rm")]
    r = rnd[0] if rnd else None
    if dt == "ue8m0x2":
        if r not in ("rz", "rp"):
            g.fail("cvt.ue8m0x2 needs .rz or .rp")
        mode = "cudaRoundZero" if r == "rz" else "cudaRoundPosInf"
    elif r != "rn":
        g.fail(f"cvt.{dt} needs .rn")
    else:
        mode = "cudaRoundNearest"
    if dt == "e2m1x2" and "satfinite" not in ins.mods:
        g.fail("cvt.e2m1x2 needs .satfinite")
    sat = "__NV_SATFINITE" if "satfinite" in ins.mods else "__NV_NOSAT"
    reg, fn = _CVT_PACKED[dt]
    expr = fn.format(a=g.val(ins.args[1], "f32"), b=g.val(ins.args[2], "f32"), sat=sat,
                     rnd=mode)
    return g.put(ins.args[0], reg, f"(({_ALL_TYPES[reg]})({expr}))")


def _cvt(g: _Gen, ins: Instr) -> str:
    packed = [m for m in ins.mods if m in _CVT_PACKED]
    if packed:
        return _cvt_packed(g, ins, packed[0])
    ts = [m for m in ins.mods if m in _ALL_TYPES]
    if len(ts) != 2:
        g.fail("expected a destination and a source type")
    dt, st = ts
    ftz = "ftz" in ins.mods
    rnd = [m for m in ins.mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")]
    if dt in ("f16x2", "bf16x2"):  # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower
        _nargs(g, ins, 3)
        if st != "f32" or (rnd and rnd[0] != "rn"):
            g.fail("only cvt.rn.{f16x2,bf16x2}.f32 is supported")
        f = "__floats2half2_rn" if dt == "f16x2" else "__floats2bfloat162_rn"
        return g.put(ins.args[0], dt, f"{f}({g.val(ins.args[2], 'f32')}, "
                                     f"{g.val(ins.args[1], 'f32')})")
    _nargs(g, ins, 2)
    a = g.val(ins.args[1], st)
    if ftz and st == "f32":
        a = f"::ncsimt::ptx::ftz({a})"
    r = rnd[0] if rnd else None
    if dt in ("f16", "bf16"):
        if st in ("f32", "f64"):
            if r not in (None, "rn"):
                g.fail(f"cvt.{r}.{dt} is not supported (only .rn)")
            f = "__float2half_rn" if dt == "f16" else "__float2bfloat16_rn"
            return g.put(ins.args[0], dt, f"{f}((float)({a}))" if st == "f32" else
                         f"{'__double2half' if dt == 'f16' else '__double2bfloat16'}({a})")
        g.fail(f"cvt.{dt}.{st} is not supported")
    if st in ("f16", "bf16"):
        f = "__half2float" if st == "f16" else "__bfloat162float"
        a = f"{f}({a})"
        st = "f32"
    if dt in _FLOAT_TYPES:
        if st in _INT_TYPES and r not in (None, "rn"):
            g.fail(f"cvt.{r} from an integer is not supported")
        e = f"(({_FLOAT_TYPES[dt]})({a}))"
        if ftz and dt == "f32":
            e = f"::ncsimt::ptx::ftz({e})"
        return g.put(ins.args[0], dt, e)
    if dt in _INT_TYPES:
        if st in _FLOAT_TYPES:
            mode = {"rni": "nearbyint", "rzi": "trunc", "rmi": "floor", "rpi": "ceil",
                    None: "trunc"}.get(r)
            if mode is None:
                g.fail(f"cvt.{r}.{dt}.{st} is not supported")
            return g.put(ins.args[0], dt, f"::ncsimt::ptx::to_int<{_INT_TYPES[dt]}>("
                                          f"std::{mode}((double)({a})), "
                                          f"{'true' if 'sat' in ins.mods else 'false'})")
        return g.put(ins.args[0], dt, f"(({_INT_TYPES[dt]})({a}))")
    g.fail(f"cvt.{dt}.{st} is not supported")


def _shfl(g: _Gen, ins: Instr) -> str:
    modes = {"up": 0, "down": 1, "bfly": 2, "idx": 3}
    mode = [m for m in ins.mods if m in modes]
    if "sync" not in ins.mods or not mode:
        g.fail("expected shfl.sync.{up,down,bfly,idx}.b32")
    _nargs(g, ins, 5)
    d, a, b, c, mask = ins.args
    dp = d.split("|")
    p = "nullptr"
    pre = ""
    if len(dp) == 2:
        pre = "bool __nc_sp = false; "
        p = "&__nc_sp"
    call = (f"::ncsimt::ptx::shfl({modes[mode[0]]}, {g.val(a, 'b32')}, {g.val(b, 'u32')}, "
            f"{g.val(c, 'u32')}, {g.val(mask, 'u32')}, {p})")
    code = pre + g.put(dp[0], "b32", call)
    if len(dp) == 2:
        code += " " + g.put(dp[1], "pred", "__nc_sp")
    return "{ " + code + " }"


def _mem_type(g, ins):
    t = _type_of(ins.mods, g.where, ins)
    v = 4 if "v4" in ins.mods else (2 if "v2" in ins.mods else (8 if "v8" in ins.mods else 1))
    if t in _HALF_TYPES or t == "pred":
        g.fail(f"loads and stores of .{t} are not supported (use .b16/.b32)")
    return t, v


def _access(g: _Gen, ins: Instr, store: bool):
    """(type, the registers, the C++ pointer declaration) of an ld (store False) or st: the
    address checked for the alignment a GPU demands of the whole vector."""
    _nargs(g, ins, 2)
    t, v = _mem_type(g, ins)
    size = _SIZES[re.sub(r"\D", "", t)] if t not in ("f32", "f64") else (4 if t == "f32" else 8)
    regs = g.vec(ins.args[1 if store else 0])
    if len(regs) != v:
        g.fail(f"expected {v} {'source' if store else 'destination'} registers")
    addr = _state_addr(ins, g.addr(ins.args[0 if store else 1]))
    ct = ("" if store else "const ") + _ALL_TYPES[t]
    decl = f"{ct}* __nc_a = ({ct}*)::ncsimt::ptx::aligned({addr}, {size * v}, {int(store)});"
    return t, regs, decl


def _shared(ins: Instr) -> bool:
    """The instruction names the shared state space (.shared, .shared::cta, .shared::cluster)."""
    return any(m == "shared" or m.startswith("shared::") for m in ins.mods)


def _state_addr(ins: Instr, addr: str) -> str:
    """A shared-space address is a shared-window one (32-bit, as __cvta_generic_to_shared
    gives): the host pointer it stands for; any other address as it is."""
    if _shared(ins):
        return f"((uint64_t)::ncsimt::shared_from_window((size_t)({addr})))"
    return addr


def _cvta(g: _Gen, ins: Instr) -> str:
    """cvta.to.shared (generic -> a shared-window address) and cvta.shared (back); the other
    state spaces are the identity here."""
    _nargs(g, ins, 2)
    t = "u32" if "u32" in ins.mods else "u64"
    src = g.val(ins.args[1], "u64")
    if "to" in ins.mods and _shared(ins):
        e = f"(::ncsimt::shared_window_of((const void*)({src})))"
    elif _shared(ins):
        e = f"((uint64_t)::ncsimt::shared_from_window((size_t)({src})))"
    else:
        e = src
    return g.put(ins.args[0], t, e)


def _ld(g: _Gen, ins: Instr) -> str:
    t, dst, decl = _access(g, ins, store=False)
    code = [decl] + [g.put(d, t, f"__nc_a[{k}]") for k, d in enumerate(dst)]
    return "{ " + " ".join(code) + " }"


def _st(g: _Gen, ins: Instr) -> str:
    t, src, decl = _access(g, ins, store=True)
    code = [decl] + [f"__nc_a[{k}] = {g.val(s, t)};" for k, s in enumerate(src)]
    return "{ " + " ".join(code) + " }"


def _nop(g, ins):
    return ";"


def _bar(g: _Gen, ins: Instr) -> str:
    if "warp" in ins.mods:
        return f"__syncwarp({g.val(ins.args[0], 'u32') if ins.args else '0xffffffffu'});"
    if ins.args and ins.args[0].strip() not in ("0",) or len(ins.args) > 1:
        g.fail("only barrier 0 over the whole block is supported")
    if "arrive" in ins.mods:
        g.fail("bar.arrive is not supported")
    return "__syncthreads();"


def _setp(g: _Gen, ins: Instr) -> str:
    cmps = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "lo": "<",
            "ls": "<=", "hi": ">", "hs": ">=", "equ": "==", "neu": "!=", "ltu": "<",
            "leu": "<=", "gtu": ">", "geu": ">="}
    c = [m for m in ins.mods if m in cmps or m in ("num", "nan")]
    t = _type_of(ins.mods, g.where, ins)
    if not c or len(ins.args) != 3:
        g.fail("expected setp.<cmp>.<type> p, a, b")
    a, b = g.val(ins.args[1], t), g.val(ins.args[2], t)
    if c[0] == "num":
        e = f"!(std::isnan((double){a}) || std::isnan((double){b}))"
    elif c[0] == "nan":
        e = f"(std::isnan((double){a}) || std::isnan((double){b}))"
    else:
        e = f"(({a}) {cmps[c[0]]} ({b}))"
        if c[0].endswith("u") and c[0] not in ("lo", "ls", "hi", "hs") and t in _FLOAT_TYPES:
            e = f"({e} || std::isnan((double){a}) || std::isnan((double){b}))"
    ps = ins.args[0].split("|")
    code = g.put(ps[0], "pred", e)
    if len(ps) == 2:
        code += " " + g.put(ps[1], "pred", f"!({e})")
    return code


def _selp(g: _Gen, ins: Instr) -> str:
    _nargs(g, ins, 4)
    t = _type_of(ins.mods, g.where, ins)
    return g.put(ins.args[0], t, f"({g.pred(ins.args[3])} ? {g.val(ins.args[1], t)} : "
                                 f"{g.val(ins.args[2], t)})")


def _bitwise(op):
    def h(g: _Gen, ins: Instr) -> str:
        t = _type_of(ins.mods, g.where, ins)
        if t == "pred":
            vals = [g.pred(a) for a in ins.args[1:]]
            e = f"!({vals[0]})" if op == "~" else f" {op * 2 if op in '&|' else '!='} ".join(vals)
            return g.put(ins.args[0], "pred", e)
        vals = [g.val(a, t) for a in ins.args[1:]]
        if op == "~":
            return g.put(ins.args[0], t, f"(~({vals[0]}))")
        if op in ("<<", ">>"):
            sh = g.val(ins.args[2], "u32")
            return g.put(ins.args[0], t, f"::ncsimt::ptx::shift<{_ALL_TYPES[t]}>({vals[0]}, {sh}, "
                                         f"{'true' if op == '<<' else 'false'})")
        return g.put(ins.args[0], t, f"(({vals[0]}) {op} ({vals[1]}))")
    return h


def _vote(g: _Gen, ins: Instr) -> str:
    if "ballot" in ins.mods:
        _nargs(g, ins, 3)
        return g.put(ins.args[0], "b32", f"__ballot_sync({g.val(ins.args[2], 'u32')}, "
                                         f"{g.pred(ins.args[1])})")
    kind = [m for m in ins.mods if m in ("all", "any", "uni")]
    if not kind:
        g.fail("expected vote.sync.{all,any,uni,ballot}")
    _nargs(g, ins, 3)
    f = {"all": "__all_sync", "any": "__any_sync"}.get(kind[0])
    if f is None:
        g.fail("vote.uni is not supported")
    return g.put(ins.args[0], "pred", f"({f}({g.val(ins.args[2], 'u32')}, "
                                      f"{g.pred(ins.args[1])}) != 0)")


def _redux(g: _Gen, ins: Instr) -> str:
    _nargs(g, ins, 3)
    t = _type_of(ins.mods, g.where, ins)
    op = [m for m in ins.mods if m in ("add", "min", "max", "and", "or", "xor")]
    if not op:
        g.fail("expected redux.sync.{add,min,max,and,or,xor}")
    if t in ("f32",):
        if op[0] not in ("min", "max"):
            g.fail("redux.sync on .f32 is min/max only")
        return g.put(ins.args[0], t, f"::ncsimt::ptx::redux_f32({op[0] == 'max'}, "
                                     f"{g.val(ins.args[1], t)}, {g.val(ins.args[2], 'u32')})")
    ct = "int" if t == "s32" else "unsigned"
    return g.put(ins.args[0], t, f"__reduce_{op[0]}_sync({g.val(ins.args[2], 'u32')}, "
                                 f"({ct})({g.val(ins.args[1], t)}))")


def _activemask(g: _Gen, ins: Instr) -> str:
    _nargs(g, ins, 1)
    return g.put(ins.args[0], "b32", "__activemask()")


def _atom(g: _Gen, ins: Instr) -> str:
    t = _type_of(ins.mods, g.where, ins)
    ops = [m for m in ins.mods if m in ("add", "min", "max", "exch", "cas", "and", "or", "xor",
                                        "inc", "dec")]
    if not ops or t not in ("u32", "s32", "f32", "u64", "b32", "b64"):
        g.fail("supported: atom/red.{add,min,max,exch,cas,and,or,xor}.{u32,s32,u64,f32,b32}")
    ct = {"u32": "unsigned", "b32": "unsigned", "s32": "int", "f32": "float",
          "u64": "unsigned long long", "b64": "unsigned long long"}[t]
    red = ins.op == "red"
    args = ins.args if red else ins.args[1:]
    a = f"(({ct}*)({_state_addr(ins, g.addr(args[0]))}))"
    f = {"add": "atomicAdd", "min": "atomicMin", "max": "atomicMax", "exch": "atomicExch",
         "cas": "atomicCAS", "and": "atomicAnd", "or": "atomicOr", "xor": "atomicXor",
         "inc": "atomicInc", "dec": "atomicDec"}[ops[0]]
    vals = ", ".join(f"({ct})({g.val(x, t)})" for x in args[1:])
    call = f"{f}({a}, {vals})"
    return f"(void){call};" if red else g.put(ins.args[0], t, call)


def _trap(g, ins):
    return "__trap();"


#: The PTX instructions the cpu backend translates, by opcode (modifiers handled inside).
INSTRUCTIONS = {
    "mov": _mov,
    "add": _binary("+"), "sub": _binary("-"), "mul": _binary("*"),
    "min": _binary("min"), "max": _binary("max"),
    "div": _float_math(_div),
    "fma": _float_math(_fma), "mad": _float_math(_fma),
    "neg": _unary("(-({}))", "(-({}))"), "abs": _unary("fabsf({})", "fabs({})"),
    "rcp": _unary("(1.0f / ({}))", "(1.0 / ({}))"),
    "sqrt": _unary("sqrtf({})", "sqrt({})"),
    "rsqrt": _unary("::ncsimt::rsqrt_rn({})", "(1.0 / sqrt({}))"),
    "ex2": _unary("exp2f({})", "exp2({})"), "lg2": _unary("log2f({})", "log2({})"),
    "sin": _unary("sinf({})"), "cos": _unary("cosf({})"), "tanh": _unary("tanhf({})"),
    "cvt": _cvt, "setp": _setp, "selp": _selp,
    "and": _bitwise("&"), "or": _bitwise("|"), "xor": _bitwise("^"), "not": _bitwise("~"),
    "shl": _bitwise("<<"), "shr": _bitwise(">>"),
    "shfl": _shfl, "vote": _vote, "redux": _redux, "activemask": _activemask,
    "ld": _ld, "ldu": _ld, "st": _st,
    "atom": _atom, "red": _atom, "cvta": _cvta,
    "bar": _bar, "barrier": _bar,
    "membar": lambda g, i: "__threadfence();", "fence": lambda g, i: "__threadfence();",
    "griddepcontrol": _nop, "prefetch": _nop, "prefetchu": _nop, "nanosleep": _nop,
    "trap": _trap, "brkpt": _trap,
}


# how an operand of each constraint letter moves in and out of its register slot
_IO = {"h": "{}<2>", "r": "{}<4>", "l": "{}<8>", "f": "{}_f", "d": "{}_d"}


def translate_statement(body: str, where: str, basic: bool = True, deferred=None) -> str:
    """C++ for the asm statement whose parenthesised part is ``body`` (from ``where``,
    file:line, for messages).  A statement that cannot be translated (an instruction outside the
    table, an operand form it does not read) becomes a call that fails the launch naming it --
    resolved when it runs, not when it is seen, so PTX that never runs is harmless; its message
    goes to ``deferred`` (a list; without one it is a PtxError now)."""
    try:
        return _translate(body, where)
    except PtxError as e:
        if deferred is None:
            raise
        deferred.append(str(e))
        return f"{{ ::ncsimt::unsupported_ptx({len(deferred) - 1}); }}"


def _translate(body: str, where: str) -> str:
    template, ops, extended = _statement(body, where)
    for o in ops:
        if o.kind not in "hrlfdn" or not o.kind:
            raise PtxError(f"{where}: asm operand constraint {o.constraint!r} is not supported "
                           "(h, r, l, f, d, n)")
        if o.kind == "n" and o.output:
            raise PtxError(f"{where}: an immediate cannot be an output")
    text = _substitute(template, ops, extended, where)
    instrs = _instructions(text, where)
    g = _Gen(ops, where)
    lines = []
    for i, o in enumerate(ops):
        s = f"__nc_o{i}"
        if o.kind == "n":
            lines.append(f"const ::ncsimt::ptx::reg {s} = (::ncsimt::ptx::reg)({o.expr});")
        elif o.output and not o.inout:
            lines.append(f"::ncsimt::ptx::reg {s} = 0;")
        else:
            fn = _IO[o.kind].format("in")
            lines.append(f"::ncsimt::ptx::reg {s} = ::ncsimt::ptx::{fn}({o.expr});")
    g.lines = lines
    for ins in instrs:
        g.emit(ins)
    for i, o in enumerate(ops):
        if o.output:
            fn = _IO[o.kind].format("out")
            g.lines.append(f"::ncsimt::ptx::{fn}({o.expr}, __nc_o{i});")
    return "{ " + " ".join(g.lines) + " }"
