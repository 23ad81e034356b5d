"""What the cpu backend rewrites in a translation unit after the preprocessor and before g++.

The cpu backend compiles a kernel in three steps: ``g++ -E`` (so every ``#if`` is decided, every
macro expanded and every included file inlined), this module's rewrites on the preprocessed text,
then g++ on the result.  Working on preprocessed text means that what is rewritten is rewritten
in every included header, and that code in branches dead on the cpu backend (``#if
__CUDA_ARCH__ >= 900``) is already gone.  The rewrites:

* ``__shared__`` (which the shim defines as the marker ``__nc_shared__``) becomes
  ``static thread_local`` (blocks run on several OS threads), followed in a function body by a
  ``SharedPoison`` of each variable (NaN bytes at the start of every block);
  ``extern __shared__ T name[];`` becomes a pointer to the block's dynamic shared memory (at
  file scope: every later use of the name);
* a host-side launch ``kernel<<<grid, block, smem, stream>>>(args)`` becomes
  ``host_launch_any(<a lambda calling kernel>, grid, block, smem, stream)(args)`` (a template
  kernel's arguments deduced from the call, as nvcc does), and ``cudaLaunchKernelEx`` a typed
  launch: they run when a spec names a host function as the entry (its own launcher);
* inline PTX (``asm``/``asm volatile``) in the user's files is translated by
  :mod:`normcheck.backends.cpu.ptx`; an instruction it does not know is a compile error naming it
  and its line.

* ``#pragma unroll`` (nvcc's hint) is dropped, also where a macro put it inside a line
  (``#define PRAGMA_UNROLL #pragma unroll``, which nvcc takes and g++ calls a stray '#').

Line markers (``# 12 "file.cu"``) are kept, so g++'s diagnostics still point at the user's files.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from normcheck.errors import CompileError

__all__ = ["rewrite", "LineMap"]

_MARKER = re.compile(r'^# (\d+) "((?:\\.|[^"\\])*)"([ \d]*)$', re.M)
# string and character literals (raw strings included), or a brace
_SKIP = re.compile(r'R"([^()\\ ]{0,16})\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"|'
                   r"'(?:\\.|[^'\\\n])*'|[{}]")
_SHARED = re.compile(r"(?:\bstatic\s+)?\b__nc_shared__\b(?:\s+static\b)?")
# whitespace, or a line marker: a macro from a system header (CUDA's __align__) expands with
# markers around its tokens, inside the user's declaration
_W = r'(?:\s|(?<=\n)# \d+ "(?:\\.|[^"\\\n])*"[ \d]*\n)'
_ATTR = rf"(?:__attribute__{_W}*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\){_W}*|" \
        rf"alignas{_W}*\((?:[^()]|\([^()]*\))*\){_W}*)"
_EXTERN_SHARED = re.compile(
    rf"\bextern{_W}+(?:static{_W}+thread_local|__nc_shared__){_W}+"
    rf"((?:{_ATTR})*)"
    rf"([A-Za-z_][\w:<>,\s\*&]*?){_W}*\b([A-Za-z_]\w*){_W}*\[{_W}*\]{_W}*"
    rf"((?:{_ATTR})*);")
_ASM = re.compile(r"\b(asm|__asm__|__asm)\b(\s*(?:\b(?:volatile|__volatile__|__volatile|inline|"
                  r"goto)\b\s*)*)\(")
_LAUNCH = re.compile(r"<<<")


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


@dataclass
class LineMap:
    """Where each offset of a preprocessed text came from (file, line, system header or not)."""

    starts: list
    files: list
    lines: list
    system: list
    text: str

    @classmethod
    def of(cls, text: str) -> "LineMap":
        starts, files, lines, system = [0], ["<unknown>"], [1], [False]
        for m in _MARKER.finditer(text):
            starts.append(m.end() + 1)
            files.append(_unescape(m.group(2)))
            lines.append(int(m.group(1)))
            flags = m.group(3).split()
            system.append("3" in flags)
        return cls(starts, files, lines, system, text)

    def where(self, pos: int) -> tuple[str, int, bool]:
        """(file, line, in a system header) of offset ``pos``."""
        k = bisect.bisect_right(self.starts, pos) - 1
        line = self.lines[k] + self.text.count("\n", self.starts[k], pos)
        return self.files[k], line, self.system[k]


class _Depth:
    """Brace depth at increasing offsets of a text, outside string and character literals."""

    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.depth = 0

    def at(self, pos: int) -> int:
        if pos < self.pos:
            self.pos, self.depth = 0, 0
        for m in _SKIP.finditer(self.text, self.pos, pos):
            c = m.group(0)
            if c == "{":
                self.depth += 1
            elif c == "}":
                self.depth -= 1
        self.pos = pos
        return self.depth


def _literal_spans(text: str, start: int, end: int):
    """(start, end) of the string/char literals in text[start:end]."""
    return [(m.start(), m.end()) for m in _SKIP.finditer(text, start, end)
            if m.group(0) not in "{}"]


def match_paren(text: str, open_pos: int) -> int:
    """Offset of the parenthesis closing the one at ``open_pos`` (literals skipped)."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            m = _SKIP.match(text, i)
            i = m.end() if m else i + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise CompileError("unbalanced parentheses in the preprocessed source")


def _shared(text: str) -> str:
    """extern __shared__ arrays to the dynamic shared memory; other __shared__ to static
    thread_local."""
    if "__nc_shared__" not in text:
        return text
    out, last = [], 0
    depth = _Depth(text)
    file_scope = {}  # name -> replacement expression, for later uses
    for m in _EXTERN_SHARED.finditer(text):
        typ, name = " ".join(m.group(2).split()), m.group(3)
        expr = f"(reinterpret_cast<{typ}*>(::ncsimt::dynamic_smem()))"
        out.append(text[last:m.start()])
        if depth.at(m.start()) > 0:
            out.append(f"{typ}* {name} = reinterpret_cast<{typ}*>(::ncsimt::dynamic_smem());")
        else:
            file_scope[name] = (m.end(), expr)
        # the declaration's own line markers go; the last one comes back after it, so the
        # lines that follow keep their numbers
        markers = _MARKER.findall(m.group(0))
        if markers:
            line, file, flags = markers[-1]
            out.append(f'\n# {line} "{file}"{flags}\n')
        last = m.end()
    out.append(text[last:])
    text = "".join(out)
    text = _poison_static_shared(text)
    text = _SHARED.sub("static thread_local", text)
    if file_scope:
        # every use after the declaration (identifier tokens outside literals)
        pat = re.compile(r"\b(" + "|".join(map(re.escape, file_scope)) + r")\b")
        spans = _literal_spans(text, 0, len(text))
        starts = [s for s, _ in spans]

        def repl(mm):
            k = bisect.bisect_right(starts, mm.start()) - 1
            if k >= 0 and spans[k][0] <= mm.start() < spans[k][1]:
                return mm.group(0)
            return file_scope[mm.group(1)][1]

        text = pat.sub(repl, text)
    return text


_NAMESPACE_OPEN = re.compile(r'(?:\bnamespace(?:\s+[\w:]+)?|\bextern\s*"C(?:\+\+)?")\s*$')
_MARKERS = re.compile(r'\n# \d+ "(?:\\.|[^"\\\n])*"[ \d]*\n')


def _function_scope(text: str, positions: list) -> list:
    """Whether each offset of ``positions`` (ascending) lies in a function body (or any other
    braces but a namespace's or an extern "C" block's)."""
    out, stack, k = [], [], 0
    for m in _SKIP.finditer(text):
        while k < len(positions) and positions[k] < m.start():
            out.append(bool(stack) and stack[-1])
            k += 1
        c = m.group(0)
        if c == "{":
            stack.append(not _NAMESPACE_OPEN.search(text, max(0, m.start() - 200), m.start()))
        elif c == "}" and stack:
            stack.pop()
    out += [bool(stack) and stack[-1]] * (len(positions) - k)
    return out


def _declared_names(decl: str):
    """The names a declaration (its text after the storage class, up to the ';') declares, or
    None where its declarators are not plain names with array bounds."""
    decl = re.sub(_ATTR, " ", _MARKERS.sub(" ", decl))
    parts, depth, angle, cur = [], 0, 0, []
    for ch in decl:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "<" and depth == 0:
            angle += 1
        elif ch == ">" and depth == 0:
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    names = []
    for part in parts:
        head = part.split("=")[0]
        head = re.sub(r"\[[^\]]*\]", " ", head)  # array bounds (one level: enough for N / 32)
        if "(" in head or "[" in head:
            return None
        ids = re.findall(r"[A-Za-z_]\w*", head)
        if not ids:
            return None
        names.append(ids[-1])
    return names


def _poison_static_shared(text: str) -> str:
    """After each function-scope ``__shared__`` declaration, on its line, a
    ``::ncsimt::SharedPoison`` of each variable it declares (normcheck_simt.h): static shared
    memory starts every block as NaN bytes, as dynamic shared memory does."""
    matches = list(_SHARED.finditer(text))
    if not matches:
        return text
    inside = _function_scope(text, [m.start() for m in matches])
    out, last = [], 0
    for k, (m, fn) in enumerate(zip(matches, inside)):
        if not fn:
            continue
        end = m.end()
        depth = 0
        while end < len(text) and not (text[end] == ";" and depth == 0):
            depth += text[end] in "([{"
            depth -= text[end] in ")]}"
            end += 1
        if end >= len(text):
            continue
        names = _declared_names(text[m.end():end])
        if not names:
            continue
        out.append(text[last:end + 1])
        out.append("".join(f" static thread_local ::ncsimt::SharedPoison __nc_sp_{k}_{j}("
                           f"(void*)&{n}, sizeof({n}), \"{n}\"); __nc_sp_{k}_{j}.reached();"
                           for j, n in enumerate(names)))
        last = end + 1
    out.append(text[last:])
    return "".join(out)


def _launch_target_start(text: str, i: int) -> int:
    """Start of the kernel expression ending just before offset ``i`` (``ns::k<T, 4>``)."""
    j = i
    while j > 0 and text[j - 1] in " \t\n":
        j -= 1
    if j > 0 and text[j - 1] == ">":  # template arguments
        depth = 0
        while j > 0:
            j -= 1
            c = text[j]
            if c == ">":
                depth += 1
            elif c == "<":
                depth -= 1
                if depth == 0:
                    break
        while j > 0 and text[j - 1] in " \t\n":
            j -= 1
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
        j -= 1
    return j


_LAUNCH_EX = re.compile(r"\bcudaLaunchKernelEx\s*\(")
#: ``cudaLaunchKernel((void*)kernel, grid, block, args, smem, stream)`` -- and its cooperative
#: twin, and the C++ casts -- as the runtime is called with an untyped argument array: the cast
#: is dropped, so the kernel keeps its type and the shim's typed overload unpacks ``args`` as
#: its parameters (the kernel's instantiation is the one the cast named)
_UNTYPED_LAUNCH = re.compile(
    r"\b(cudaLaunchKernel|cudaLaunchCooperativeKernel)\s*\(\s*"
    r"(?:\(\s*(?:const\s+)?void\s*\*\s*\)|(?:reinterpret_cast|static_cast)\s*<\s*"
    r"(?:const\s+)?void\s*\*\s*>)")


def _host_launches(text: str, user) -> str:
    """``k<<<cfg>>>(args)`` -> ``::ncsimt::host_launch_any(<a lambda calling k>, cfg)(args)``
    (k's template arguments deduced from the call's, as nvcc does) and
    ``cudaLaunchKernelEx(`` -> ``::ncsimt::launch_ex(`` (typed: the kernel's parameters are
    known there), and ``cudaLaunchKernel((void*)k, ...)`` -> ``cudaLaunchKernel(k, ...)`` (the
    shim's typed overload: ``args`` unpacked as k's parameters), launches that run in order when
    a host function is the entry."""
    if _LAUNCH_EX.search(text):
        lines = LineMap.of(text)
        text = _LAUNCH_EX.sub(lambda m: "::ncsimt::launch_ex(" if user(*lines.where(m.start())[::2])
                              else m.group(0), text)
    if _UNTYPED_LAUNCH.search(text):
        lines = LineMap.of(text)
        text = _UNTYPED_LAUNCH.sub(lambda m: f"{m.group(1)}(" if user(
            *lines.where(m.start())[::2]) else m.group(0), text)
    if "<<<" not in text:
        return text
    out, last = [], 0
    pos = 0
    while True:
        i = text.find("<<<", pos)
        if i < 0:
            break
        j = text.find(">>>", i + 3)
        if j < 0:
            break
        start = max(_launch_target_start(text, i), last)
        out.append(text[last:start])
        target = text[start:i].strip()
        if target:  # a lambda calling it: template arguments deduced from the call's
            out.append("::ncsimt::host_launch_any([&](auto&&... ncsimt_a) { (" + target +
                       ")(ncsimt_a...); }, ")
        else:
            out.append("::ncsimt::host_launch((void(*)())nullptr, ")
        out.append(text[i + 3:j])
        out.append(")")
        out.append("\n" * text.count("\n", start, i))
        last = pos = j + 3
    out.append(text[last:])
    return "".join(out)


def _asm(text: str, lines: LineMap, user_file, deferred: list) -> str:
    """Translate the inline PTX of the user's files and of the CUDA headers (see
    normcheck.backends.cpu.ptx); what cannot be translated fails at run time, its message in
    ``deferred``."""
    from normcheck.backends.cpu import ptx

    out, last = [], 0
    for m in _ASM.finditer(text):
        if m.start() < last:
            continue
        file, line, system = lines.where(m.start())
        if not user_file(file, system):
            continue
        open_pos = m.end() - 1
        close = match_paren(text, open_pos)
        end = close + 1
        # the statement's semicolon
        k = end
        while k < len(text) and text[k] in " \t\n":
            k += 1
        if k < len(text) and text[k] == ";":
            end = k + 1
        code = ptx.translate_statement(text[open_pos + 1:close], f"{file}:{line}",
                                       basic="goto" not in m.group(2), deferred=deferred)
        out.append(text[last:m.start()])
        # keep the line count: the translation goes on the asm's first line
        out.append(code + "\n" * text.count("\n", m.start(), end))
        last = end
    out.append(text[last:])
    return "".join(out)


# `__noinline__` is no macro of the shim (libstdc++ writes __attribute__((__noinline__)), which
# GCC knows): a bare one -- the CUDA keyword, before a declaration -- becomes the attribute; one
# inside an attribute list (after `((` or `,`) stays
def _noinline(text: str) -> str:
    if "__noinline__" not in text:
        return text
    return re.sub(r"(\(\(|,)(\s*)__noinline__\b|\b__noinline__\b",
                  lambda m: m.group(0) if m.group(1) else "__attribute__((noinline))", text)


# ``#pragma unroll [N]``, ``#pragma nounroll``: a directive line (any argument) or, where a macro
# produced it (``#define PRAGMA_UNROLL #pragma unroll``: nvcc takes the '#' in the expansion, g++
# calls it stray), in the middle of a line with an optional number or parenthesised argument
_UNROLL_LINE = re.compile(r"^[^\S\n]*#[^\S\n]*pragma[^\S\n]+(?:unroll|nounroll)\b"
                          r"[^\S\n]*(?!(?:for|while|do|if)\b)(?:\([^\n]*\)|[\w:]+(?:[^\S\n]*"
                          r"[-+*/][^\S\n]*[\w:]+)*)?[^\S\n]*$", re.M)
_UNROLL_INLINE = re.compile(r"#[^\S\n]*pragma[^\S\n]+(?:unroll|nounroll)\b"
                            r"(?:[^\S\n]*(?:\([^()\n]*\)|-?\d+\b))?")


def _unroll_pragmas(text: str) -> str:
    """Unrolling hints are nvcc's alone (g++ has ``#pragma GCC unroll``): dropped, the macro-made
    ones inside a line included (a CUTLASS_PRAGMA_UNROLL, FasterTransformer's PRAGMA_UNROLL)."""
    if "pragma" not in text:
        return text
    text = _UNROLL_LINE.sub("", text)
    return _UNROLL_INLINE.sub(" ", text)


def rewrite(text: str, ptx_file) -> tuple[str, list]:
    """All the rewrites, in order; ``ptx_file(path, system)`` says whether a file's inline asm is
    PTX to translate (the user's files and the CUDA headers; never the host's C and C++ headers).
    Returns the text and the messages of the PTX statements left to fail at run time."""
    text = _unroll_pragmas(_noinline(re.sub(r"\b__nc_global__\b", "", text)))
    lines = LineMap.of(text)
    deferred = []
    if re.search(r"\b(?:asm|__asm__|__asm)\b", text):
        text = _asm(text, lines, ptx_file, deferred)
    text = _shared(text)
    own = lambda f, system: not system and ptx_file(f, system)  # noqa: E731
    text = _device_clock(text, own)
    text = _host_launches(text, own)
    return text, deferred


_CLOCK = re.compile(r"(?<![\w:.>])clock\s*\(\s*\)")


def _device_clock(text: str, own) -> str:
    """CUDA's ``clock()`` in the user's own files becomes the shim's ``::ncsimt::clock32()`` (an
    int of a cycle counter), where libc's is a ``clock_t`` of CPU time: a ``clock`` macro in the
    shim broke libcu++'s <cuda/std/chrono> and anything else that includes <time.h> after it
    ("libcu++ requires the C++ compatibility <time.h> header"), so only calls written in the
    user's code are renamed, never a header's declaration."""
    if "clock" not in text:
        return text
    lines = LineMap.of(text)
    out, pos = [], 0
    for m in _CLOCK.finditer(text):
        f, _line, system = lines.where(m.start())
        if own(f, system):
            out.append(text[pos:m.start()])
            out.append("::ncsimt::clock32()")
            pos = m.end()
    return "".join(out) + text[pos:]
