"""The cpu backend's worker process: loads compiled kernels and launches them on guarded buffers.

A kernel may crash, hang or touch memory it does not own; it does so here, not in the caller.
Protocol on stdin/stdout: length-prefixed pickles.  Request::

    {"so": path, "index": i, "grid": (x,y,z), "block": (x,y,z), "shared_mem": n,
     "shm": path, "args": [("array", offset, region, nbytes, itemsize) |
                           ("scalar", dtype_str, value_bytes)],
     "workers": n, "schedule": 0|1|2, "seed": s, "report": path}

The arrays live in the shared file ``shm``: array i in the page-aligned region [offset,
offset+region), its data at the region's end, the bytes before it a 0xA5 canary.  The worker maps
each region between two inaccessible pages, so the kernel works on the caller's memory with no
copy.  Reply: {"ok": True, "seconds": t} or {"ok": False, "kind": ..., "message": ...}.  When the kernel kills the process, the shim's signal handler writes one line to the report
file first (what, where, which argument) and the parent reads it.

Imports nothing heavy, so it starts in tens of milliseconds.
"""

import ctypes
import os
import pickle
import struct
import sys
import time

_PAGE = os.sysconf("SC_PAGE_SIZE")


class LaunchParams(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem", ctypes.c_ulonglong),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
        ("nworkers", ctypes.c_int),
        ("schedule", ctypes.c_int),
        ("seed", ctypes.c_ulonglong),
        ("err", ctypes.c_char_p),
        ("errlen", ctypes.c_int),
        ("nbuffers", ctypes.c_int),
        ("buf_begin", ctypes.POINTER(ctypes.c_ulonglong)),
        ("buf_end", ctypes.POINTER(ctypes.c_ulonglong)),
        ("buf_arg", ctypes.POINTER(ctypes.c_int)),
        ("buf_itemsize", ctypes.POINTER(ctypes.c_int)),
        ("report_fd", ctypes.c_int),
    ]


_libs = {}


def _lib(path):
    lib = _libs.get(path)
    if lib is None:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        lib.ncsimt_map_guarded.restype = ctypes.c_void_p
        lib.ncsimt_map_guarded.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong]
        lib.ncsimt_free_guarded.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong]
        _libs[path] = lib
    return lib


def launch(req):
    """Map the caller's arrays from the shared file (each between guard pages, its last byte
    against the upper one), launch, check the canaries before each array."""
    lib = _lib(req["so"])
    fn = getattr(lib, f"ncsimt_launch_{req['index']}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(LaunchParams)]
    args = req["args"]
    n = len(args)
    holders = []
    argv = (ctypes.c_void_p * max(n, 1))()
    buffers = []  # (data ptr, nbytes, map base, map len, arg index, itemsize, slack)
    fd = os.open(req["shm"], os.O_RDWR)
    try:
        for i, a in enumerate(args):
            if a[0] == "array":
                _, offset, region, nbytes, itemsize = a
                base = lib.ncsimt_map_guarded(fd, offset, region)
                if not base:
                    return {"ok": False, "kind": "launch",
                            "message": f"could not map {nbytes} bytes for argument {i}"}
                ptr = base + _PAGE + region - nbytes
                buffers.append((ptr, nbytes, base, region + 2 * _PAGE, i, itemsize,
                                region - nbytes))
                holder = ctypes.c_void_p(ptr)
                argv[i] = ctypes.cast(ctypes.pointer(holder), ctypes.c_void_p)
            else:
                holder = ctypes.create_string_buffer(a[2], max(len(a[2]), 16))
                argv[i] = ctypes.cast(holder, ctypes.c_void_p)
            holders.append(holder)
        nb = len(buffers)
        err = ctypes.create_string_buffer(4096)
        p = LaunchParams()
        p.grid[:] = req["grid"]
        p.block[:] = req["block"]
        p.shared_mem = req["shared_mem"]
        p.args = ctypes.cast(argv, ctypes.POINTER(ctypes.c_void_p))
        p.nworkers = req["workers"]
        p.schedule = req["schedule"]
        p.seed = req["seed"]
        p.err = ctypes.cast(err, ctypes.c_char_p)
        p.errlen = len(err)
        p.nbuffers = nb
        begins = (ctypes.c_ulonglong * max(nb, 1))(*[b[0] for b in buffers])
        ends = (ctypes.c_ulonglong * max(nb, 1))(*[b[0] + b[1] for b in buffers])
        argi = (ctypes.c_int * max(nb, 1))(*[b[4] for b in buffers])
        items = (ctypes.c_int * max(nb, 1))(*[b[5] for b in buffers])
        p.buf_begin, p.buf_end, p.buf_arg, p.buf_itemsize = begins, ends, argi, items
        rfd = os.open(req["report"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        p.report_fd = rfd
        t0 = time.perf_counter()
        try:
            rc = fn(ctypes.byref(p))
        finally:
            os.close(rfd)
        seconds = time.perf_counter() - t0
        if rc != 0:
            kind = "deadlock" if rc == 1 and err.value.startswith(b"deadlock") else "launch"
            return {"ok": False, "kind": kind, "message": err.value.decode(errors="replace")}
        # writes into the slack before an array (a negative index) hit the 0xA5 canary
        for ptr, nbytes, base, length, i, itemsize, slack in buffers:
            if slack > 0:
                before = ctypes.string_at(ptr - slack, slack)
                if before.count(0xA5) != slack:
                    k = min(j for j in range(slack) if before[j] != 0xA5)
                    return {"ok": False, "kind": "out_of_bounds",
                            "message": f"arg={i} access=write before_start_bytes={slack - k} "
                                       f"size_bytes={nbytes} itemsize={itemsize}"}
        return {"ok": True, "seconds": seconds}
    finally:
        os.close(fd)
        for b in buffers:
            lib.ncsimt_free_guarded(b[2], b[3])


def signatures(req):
    try:
        lib = _lib(req["so"])
    except OSError as e:
        return {"ok": False, "message": str(e)}
    out = []
    for i in range(req["n"]):
        fn = getattr(lib, f"ncsimt_signature_{i}")
        fn.restype = ctypes.c_char_p
        out.append(fn().decode())
    return {"ok": True, "signatures": out}


def _read(stream, n):
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main():
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # keep the protocol stream clean: the kernel's printf goes to stderr
    proto = os.fdopen(os.dup(out.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), 1)
    while True:
        head = _read(inp, 8)
        if head is None:
            return
        (n,) = struct.unpack("<Q", head)
        req = pickle.loads(_read(inp, n))
        if req.get("op") == "ping":
            rep = {"ok": True, "pid": os.getpid()}
        elif req.get("op") == "signatures":
            rep = signatures(req)
        else:
            rep = launch(req)
        data = pickle.dumps(rep, protocol=pickle.HIGHEST_PROTOCOL)
        proto.write(struct.pack("<Q", len(data)))
        proto.write(data)
        proto.flush()


if __name__ == "__main__":
    main()
