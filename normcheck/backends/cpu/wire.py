"""The cpu backend's wire format between normcheck and its worker process, which is untrusted.

The worker runs the kernel under test, so every byte it sends may have been written by that
kernel (it can find the reply pipe and write anything into it).  Nothing it sends is unpickled
or evaluated: a message is a fixed binary format, parsed by code that treats every byte as
hostile and checks every length before it reads.

A message::

    magic    b"NCW"           3 bytes
    version  1                1 byte
    length   n                u32, little-endian: the payload's bytes (at most MAX_MESSAGE)
    payload  one value

A value is a tag byte and its body: ``N`` None, ``T``/``F`` a bool, ``i`` an int64, ``d`` a
float64, ``s`` a UTF-8 string (u32 length, then the bytes), ``b`` bytes (u32 length, then the
bytes), ``l`` a list (u32 count, then the values), ``m`` a map (u32 count, then pairs of a
string key and a value).  Nesting is at most MAX_DEPTH deep, a string or bytes at most
MAX_STRING long, a list or map at most MAX_ITEMS long, and the payload is read exactly: nothing
may follow the value.

:func:`decode` raises :class:`WireError` (what was wrong and where) on anything else; the caller
turns it into a failure of kind ``sandbox``.  :func:`check` validates a decoded reply against a
small schema (the keys, their types, the closed sets of strings) the same way.

Imports nothing heavy: the worker uses it too.
"""

from __future__ import annotations

import math
import struct

__all__ = ["encode", "decode", "header_length", "WireError", "check", "MAGIC", "VERSION",
           "MAX_MESSAGE", "HEADER"]

MAGIC = b"NCW"
VERSION = 1
HEADER = 8
MAX_MESSAGE = 1 << 20
MAX_DEPTH = 8
MAX_STRING = 1 << 16
MAX_ITEMS = 4096


class WireError(ValueError):
    """A message that is not in the wire format (or not what the schema asks)."""


def encode(value) -> bytes:
    """The whole message (header and payload) for ``value``."""
    out = bytearray()
    _put(out, value, 0)
    if len(out) > MAX_MESSAGE:
        raise WireError(f"a message of {len(out)} bytes is over the limit of {MAX_MESSAGE}")
    return MAGIC + bytes([VERSION]) + struct.pack("<I", len(out)) + bytes(out)


def _put(out: bytearray, v, depth: int):
    if depth > MAX_DEPTH:
        raise WireError("nested too deep")
    if v is None:
        out += b"N"
    elif v is True:
        out += b"T"
    elif v is False:
        out += b"F"
    elif isinstance(v, int):
        out += b"i" + struct.pack("<q", v)
    elif isinstance(v, float):
        out += b"d" + struct.pack("<d", v)
    elif isinstance(v, str):
        data = v.encode("utf-8", "replace")
        if len(data) > MAX_STRING:
            data = data[:MAX_STRING].decode("utf-8", "ignore").encode()
        out += b"s" + struct.pack("<I", len(data)) + data
    elif isinstance(v, (bytes, bytearray)):
        if len(v) > MAX_STRING:
            raise WireError("bytes too long")
        out += b"b" + struct.pack("<I", len(v)) + bytes(v)
    elif isinstance(v, (list, tuple)):
        if len(v) > MAX_ITEMS:
            raise WireError("list too long")
        out += b"l" + struct.pack("<I", len(v))
        for x in v:
            _put(out, x, depth + 1)
    elif isinstance(v, dict):
        if len(v) > MAX_ITEMS:
            raise WireError("map too long")
        out += b"m" + struct.pack("<I", len(v))
        for k, x in v.items():
            if not isinstance(k, str):
                raise WireError("map keys are strings")
            _put(out, k, depth + 1)
            _put(out, x, depth + 1)
    else:
        raise WireError(f"cannot encode a {type(v).__name__}")


def header_length(head: bytes) -> int:
    """The payload length a header announces; WireError unless it is a valid header."""
    if len(head) != HEADER:
        raise WireError(f"a header of {len(head)} bytes (expected {HEADER})")
    if head[:3] != MAGIC:
        raise WireError(f"bad magic {head[:3]!r} (expected {MAGIC!r})")
    if head[3] != VERSION:
        raise WireError(f"wire version {head[3]} (expected {VERSION})")
    (n,) = struct.unpack("<I", head[4:])
    if n > MAX_MESSAGE:
        raise WireError(f"a payload of {n} bytes announced (the limit is {MAX_MESSAGE})")
    return n


def decode(payload: bytes):
    """The value of a payload (without its header); WireError on anything malformed."""
    r = _Reader(payload)
    v = r.value(0)
    if r.pos != len(payload):
        raise WireError(f"{len(payload) - r.pos} bytes after the value")
    return v


class _Reader:
    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireError(f"truncated at byte {self.pos} (needed {n} more)")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self, limit: int, what: str) -> int:
        (n,) = struct.unpack("<I", self.take(4))
        if n > limit:
            raise WireError(f"{what} of {n} at byte {self.pos - 4} (the limit is {limit})")
        return n

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            raise WireError(f"nested more than {MAX_DEPTH} deep")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"i":
            return struct.unpack("<q", self.take(8))[0]
        if tag == b"d":
            return struct.unpack("<d", self.take(8))[0]
        if tag == b"s":
            raw = self.take(self.u32(MAX_STRING, "a string"))
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise WireError(f"a string that is not UTF-8 before byte {self.pos}") from None
        if tag == b"b":
            return self.take(self.u32(MAX_STRING, "bytes"))
        if tag == b"l":
            n = self.u32(MAX_ITEMS, "a list")
            return [self.value(depth + 1) for _ in range(n)]
        if tag == b"m":
            n = self.u32(MAX_ITEMS, "a map")
            out = {}
            for _ in range(n):
                k = self.value(depth + 1)
                if not isinstance(k, str):
                    raise WireError(f"a map key that is not a string before byte {self.pos}")
                out[k] = self.value(depth + 1)
            return out
        raise WireError(f"unknown tag {tag!r} at byte {self.pos - 1}")


# ------------------------------------------------------------------------------------------------
# Schemas of the replies
# ------------------------------------------------------------------------------------------------
def check(value, schema: dict, what: str) -> dict:
    """``value`` checked against ``schema`` ({key: type, a tuple of allowed strings, or a
    callable returning an error or None}); keys marked optional end in "?".  Returns it."""
    if not isinstance(value, dict):
        raise WireError(f"{what}: a {type(value).__name__}, not a map")
    allowed = {k.rstrip("?") for k in schema}
    extra = [k for k in value if k not in allowed]
    if extra:
        raise WireError(f"{what}: unexpected key {extra[0]!r}")
    for key, rule in schema.items():
        name = key.rstrip("?")
        if name not in value:
            if key.endswith("?"):
                continue
            raise WireError(f"{what}: the key {name!r} is missing")
        v = value[name]
        if isinstance(rule, tuple):
            if v not in rule:
                raise WireError(f"{what}: {name}={_show(v)} is not one of {', '.join(rule)}")
        elif isinstance(rule, type):
            ok = isinstance(v, rule) and not (rule is int and isinstance(v, bool))
            if rule is float and isinstance(v, float) and not math.isfinite(v):
                ok = False
            if not ok:
                raise WireError(f"{what}: {name}={_show(v)} is not a finite {rule.__name__}"
                                if rule is float else
                                f"{what}: {name}={_show(v)} is not a {rule.__name__}")
        else:
            err = rule(v)
            if err:
                raise WireError(f"{what}: {name}={_show(v)}: {err}")
    return value


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
