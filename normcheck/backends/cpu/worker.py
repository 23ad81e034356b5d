"""The cpu backend's worker process: loads compiled kernels and launches them on guarded buffers.

A kernel may crash, hang, touch memory it does not own or try to leave its sandbox; it does so
here, not in the caller.  The worker:

* is started by ``normcheck-launch`` in a PID namespace (or process group) that dies with
  normcheck whatever runs here; also dies with its parent (``PR_SET_PDEATHSIG``, which the
  sandbox then forbids changing, plus a watchdog thread that polls the parent's pid); opens no
  file of its own: the arena it shares with the parent is an already-unlinked file whose
  descriptor it inherits (``NORMCHECK_ARENA_FD``);
* sandboxes itself before any user code is loaded (:mod:`normcheck.backends.cpu.sandbox`);
* maps each array of a launch from the arena between inaccessible pages, launches, then checks
  the canaries around each array.

Protocol on stdin/stdout: messages of :mod:`normcheck.backends.cpu.wire` (never pickles: what the
worker sends is untrusted, since a kernel can write into the pipe).  Request::

    {"op": "launch", "so": path, "index": i, "grid": [x,y,z], "block": [x,y,z],
     "shared_mem": n, "args": [["array", offset, region, start, nbytes, itemsize] |
                               ["scalar", dtype_str, value_bytes] | ["null"]],
     "workers": n, "schedule": 0|1|2, "seed": s, "fill": byte, "blocks": [mask, value]?}

``fill`` is the byte undefined values are made of (shared memory before a block writes it, a
shuffle from a lane not taking part): 0xFF, NaN as a float, unless a second run asks otherwise.

Array i lives in the arena region [offset, offset+region) with its data at ``start`` bytes into
the region; every other byte of the region is a 0xA5 canary.  Page 0 of the arena is the report
page: when the kernel kills the process, the signal handler writes one line there first (what,
where, which argument) and the parent reads it.  Replies: {"ok": True, "seconds": t, "cpu": c}
or {"ok": False, "kind": ..., "message": ..., "cpu": c} (``cpu``: the worker's CPU time so far,
which the parent uses to start a fresh worker before the lifetime limit is reached).

Imports nothing heavy, so it starts in tens of milliseconds.
"""

import ctypes
import os
import resource
import sys
import threading
import time

from normcheck.backends.cpu import wire

_PAGE = os.sysconf("SC_PAGE_SIZE")
REPORT_BYTES = 1024


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
        ("report", ctypes.c_char_p),
        ("report_len", ctypes.c_int),
        ("fill", ctypes.c_int),
        ("buf_lo", ctypes.POINTER(ctypes.c_ulonglong)),
        ("buf_hi", ctypes.POINTER(ctypes.c_ulonglong)),
        ("block_mask", ctypes.c_ulonglong),
        ("block_val", ctypes.c_ulonglong),
        ("hazards", ctypes.c_int),
        ("max_dyn_smem", ctypes.c_ulonglong),
    ]


#: A failed launch's kind, from the runtime's message (normcheck_runtime.h, normcheck_hazards.h).
_FAILED = ((b"deadlock", "deadlock"), (b"race (", "race"), (b"barrier divergence", "barrier"),
           (b"launch refused", "launch_limit"))

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_NONE, _PROT_RW = 0, 3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANON, _MAP_NORESERVE = 1, 2, 0x10, 0x20, 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value

_libs = {}
_ARENA = -1
_report = None  # (address, mapping length) of the report page


#: The largest inaccessible margin kept on each side of an array.
GUARD_MAX = 64 << 20


def guard_bytes(length: int) -> int:
    """The inaccessible margin on each side of an array of ``length`` bytes (a multiple of the
    page): as large as the array, at least a page, at most GUARD_MAX -- so an access up to one
    array's length before or past it faults there and is named as that array's, rather than
    landing in another mapping (another array's data, say)."""
    return min(max(_PAGE, -(-length // _PAGE) * _PAGE), GUARD_MAX)


def map_guarded(offset: int, length: int, below: int = 0) -> int:
    """Map arena[offset, offset+length) with an inaccessible margin (guard_bytes) on each side
    (``below``: a wider one below, a multiple of the page); returns the address of the data (the
    whole reservation starts one margin before it)."""
    g = guard_bytes(length)
    if below:
        return _map_wide(offset, length, below, g)
    total = length + 2 * g
    base = _libc.mmap(None, total, _PROT_NONE, _MAP_PRIVATE | _MAP_ANON | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        return 0
    d = _libc.mmap(base + g, length, _PROT_RW, _MAP_SHARED | _MAP_FIXED, _ARENA, offset)
    if d in (None, _MAP_FAILED):
        _libc.munmap(base, total)
        return 0
    return base + g


def _map_wide(offset, length, below, above):
    total = below + length + above
    base = _libc.mmap(None, total, _PROT_NONE, _MAP_PRIVATE | _MAP_ANON | _MAP_NORESERVE, -1, 0)
    if base in (None, _MAP_FAILED):
        return 0
    d = _libc.mmap(base + below, length, _PROT_RW, _MAP_SHARED | _MAP_FIXED, _ARENA, offset)
    if d in (None, _MAP_FAILED):
        _libc.munmap(base, total)
        return 0
    return base + below


def wide_margin(itemsize: int) -> int:
    """The margin below a large-index run's array: 2^31 elements (normcheck.backends.cpu.
    backend.wide_margin, the parent's count of the same)."""
    return -(-((1 << 31) * max(int(itemsize), 1)) // _PAGE) * _PAGE


def unmap(base: int, length: int):
    """Unmap what :func:`map_guarded` reserved (its margins included)."""
    _libc.munmap(base, length)


def _report_page():
    global _report
    if _report is None:
        addr = _libc.mmap(None, _PAGE, _PROT_RW, _MAP_SHARED, _ARENA, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), "cannot map the report page")
        _report = addr
    return _report


def _lib(path):
    lib = _libs.get(path)
    if lib is None:
        # lazy binding: host code in the user's file may name CUDA runtime functions it never
        # calls here
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_LAZY)
        _libs[path] = lib
    return lib


def launch(req):
    lib = _lib(req["so"])
    fn = getattr(lib, f"ncsimt_launch_{req['index']}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(LaunchParams)]
    args = req["args"]
    n = req.get("nparams", len(args))  # the kernel's parameters; then arrays structs point to
    holders = []
    argv = (ctypes.c_void_p * max(n, 1))()
    buffers = []  # (data ptr, nbytes, map base, map len, arg index, itemsize, region start, region)
    addresses = {}
    structs = []
    try:
        wide = set(req.get("wide", ()))  # the arena offsets of a large-index run's arrays
        for i, a in enumerate(args):
            if a[0] == "struct":
                holder = ctypes.create_string_buffer(a[1], max(len(a[1]), 16))
                argv[i] = ctypes.cast(holder, ctypes.c_void_p)
                holders.append(holder)
                structs.append((holder, a[2]))
                continue
            if a[0] == "array":
                _, offset, region, start, nbytes, itemsize = a
                below = wide_margin(itemsize) if offset in wide else 0
                rbase = map_guarded(offset, region, below)
                if not rbase:
                    return {"ok": False, "kind": "launch",
                            "message": f"could not map {nbytes} bytes for argument {i}"}
                ptr = rbase + start
                g = guard_bytes(region)
                buffers.append((ptr, nbytes, rbase - (below or g), region + (below or g) + g,
                                i, itemsize, rbase, region))
                addresses[i] = ptr
                holder = ctypes.c_void_p(ptr)
                if i < n:
                    argv[i] = ctypes.cast(ctypes.pointer(holder), ctypes.c_void_p)
            elif a[0] == "null":
                holder = ctypes.c_void_p(0)
                argv[i] = ctypes.cast(ctypes.pointer(holder), ctypes.c_void_p)
            else:
                holder = ctypes.create_string_buffer(a[2], max(len(a[2]), 16))
                argv[i] = ctypes.cast(holder, ctypes.c_void_p)
            holders.append(holder)
        for holder, fields in structs:  # the arrays' addresses into the structs' pointer fields
            for off, j in fields:
                if not 0 <= off <= len(holder.raw) - 8 or j not in addresses:
                    return {"ok": False, "kind": "launch",
                            "message": f"a struct field at byte {off} names no array"}
                ctypes.memmove(ctypes.addressof(holder) + off,
                               ctypes.byref(ctypes.c_uint64(addresses[j])), 8)
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
        p.fill = int(req.get("fill", 0xFF)) & 0xFF
        sub = req.get("blocks")  # [mask, value]: a subset launch
        p.block_mask, p.block_val = (int(sub[0]), int(sub[1])) if sub else (0, 0)
        p.hazards = 1 if req.get("hazards") else 0
        p.max_dyn_smem = int(req.get("max_dyn_smem") or 0)
        p.err = ctypes.cast(err, ctypes.c_char_p)
        p.errlen = len(err)
        p.nbuffers = nb
        begins = (ctypes.c_ulonglong * max(nb, 1))(*[b[0] for b in buffers])
        ends = (ctypes.c_ulonglong * max(nb, 1))(*[b[0] + b[1] for b in buffers])
        argi = (ctypes.c_int * max(nb, 1))(*[b[4] for b in buffers])
        items = (ctypes.c_int * max(nb, 1))(*[b[5] for b in buffers])
        p.buf_begin, p.buf_end, p.buf_arg, p.buf_itemsize = begins, ends, argi, items
        p.buf_lo = (ctypes.c_ulonglong * max(nb, 1))(*[b[2] for b in buffers])
        p.buf_hi = (ctypes.c_ulonglong * max(nb, 1))(*[b[2] + b[3] for b in buffers])
        p.report = ctypes.cast(_report_page(), ctypes.c_char_p)
        p.report_len = REPORT_BYTES
        global _THREAD_LIMIT
        threads = _threads()
        _THREAD_LIMIT = threads + THREADS_PER_LAUNCH + max(1, int(req["workers"]))
        t0 = time.perf_counter()
        try:
            rc = fn(ctypes.byref(p))
        finally:
            _THREAD_LIMIT = 0
        seconds = time.perf_counter() - t0
        left = _left_running(threads)
        if left > 0:  # a kernel's threads end with its launch (normcheck restarts the worker)
            return {"ok": False, "kind": "threads",
                    "message": f"{left} thread{'s' * (left != 1)} still running after the "
                               f"launch returned"}
        if rc != 0:
            kind = next((k for prefix, k in _FAILED if err.value.startswith(prefix)), "launch")
            return {"ok": False, "kind": kind, "message": err.value.decode(errors="replace")}
        # writes into the canary bytes around an array (just before it, or after its end
        # within its pages) are out of bounds too: a report in the crash report's words, with
        # detail=canary (found after the launch: which thread wrote is not known here)
        for ptr, nbytes, _b, _l, i, itemsize, rstart, region in buffers:
            before = ptr - rstart
            if before > 0:
                raw = ctypes.string_at(rstart, before)
                if raw.count(0xA5) != before:
                    k = min(j for j in range(before) if raw[j] != 0xA5)
                    return {"ok": False, "kind": "out_of_bounds",
                            "message": f"kind=out_of_bounds access=write arg={i} "
                                       f"before_start_bytes={before - k} size_bytes={nbytes} "
                                       f"itemsize={itemsize} detail=canary"}
            after = rstart + region - (ptr + nbytes)
            if after > 0:
                raw = ctypes.string_at(ptr + nbytes, after)
                if raw.count(0xA5) != after:
                    k = min(j for j in range(after) if raw[j] != 0xA5)
                    return {"ok": False, "kind": "out_of_bounds",
                            "message": f"kind=out_of_bounds access=write arg={i} "
                                       f"past_end_bytes={k} size_bytes={nbytes} "
                                       f"itemsize={itemsize} detail=canary"}
        rep = {"ok": True, "seconds": seconds}
        if err.value:  # a note of a launch that completed (an undefined shuffle read)
            rep["note"] = err.value.decode(errors="replace")
        return rep
    finally:
        for b in buffers:
            _libc.munmap(b[2], b[3])


#: /proc/self/task, opened before the sandbox is entered (landlock keeps /proc out of reach
#: afterwards): the worker's threads are counted before and after every launch.
_TASKS = None


#: The threads a launch may add beyond its workers (the shim's and libstdc++'s helpers, a
#: kernel's own short-lived ones): more, while it runs, ends the worker (the watchdog below).
THREADS_PER_LAUNCH = 256
_THREAD_LIMIT = 0  # nonzero while a launch runs


_TASKS_LOCK = threading.Lock()


def _threads() -> int:
    """The worker's threads.  One listing at a time: os.listdir of a descriptor reads a dup of
    it, which shares the directory offset, so the watchdog's listing and the launch's own could
    interleave and count entries twice or skip them (a sound launch was once failed for '3
    threads still running')."""
    if _TASKS is None:
        return 0
    with _TASKS_LOCK:
        return len(os.listdir(_TASKS))


#: How long joined threads may take to leave /proc/self/task (past pthread_join, a thread is
#: still finishing its exit in the kernel; on a loaded machine that can take a while).
EXIT_GRACE_S = 2.0


def _left_running(before: int) -> int:
    """Threads beyond ``before`` still alive after a launch: the count is taken again, at
    growing intervals, for up to EXIT_GRACE_S before a thread is called left running (a launch
    without one pays one count)."""
    deadline = time.monotonic() + EXIT_GRACE_S
    pause = 0.002
    while True:
        left = _threads() - before
        if left <= 0 or time.monotonic() > deadline:
            return left
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


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


def read_file(path) -> str:
    """A file's text, read without open() (whose isatty() check is an ioctl the sandbox
    refuses): a Python worker's kernel file, from normcheck's cache."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _read(stream, n):
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _die_with_parent(parent: int):
    """SIGKILL when the parent (normcheck-launch, or its namespace's init) dies: the kernel
    delivers it, and the sandbox forbids changing it afterwards."""
    PR_SET_PDEATHSIG = 1
    _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def _watchdog(parent: int):
    """A thread that ends the process within a quarter of a second of the parent's death, for
    the case where the death signal was lost (the parent died before prctl, say); and, while a
    launch runs, within 20 ms of its thread count passing the launch's limit (a flood of
    threads, whatever call made them: no rlimit bounds a root user's threads), with a crash
    report that says so."""

    def watch():
        n = 0
        while True:
            time.sleep(0.02)
            limit = _THREAD_LIMIT
            if limit and _threads() > limit:
                msg = f"kind=sandbox detail=threads limit={limit}\0".encode()
                ctypes.memmove(_report_page(), msg, len(msg))
                os._exit(3)
            n += 1
            if n % 12 == 0 and os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, daemon=True, name="normcheck-watchdog").start()


def _send(out, value):
    out.write(wire.encode(value))
    out.flush()


def _imported_from_where_normcheck_installs():
    """The assertion before the sandbox: every module imported so far comes from the
    interpreter's folders or normcheck's package (normcheck.backends.isolation), else the
    worker stops (exit 3) naming the module and its file."""
    from normcheck.backends.isolation import foreign_modules

    bad = foreign_modules()
    if bad:
        name, f = bad[0]
        sys.stderr.write(f"normcheck: the worker stops: module {name} was imported from {f}, "
                         "outside the interpreter's folders and normcheck's package\n")
        sys.stderr.flush()
        os._exit(3)


def main(handlers=None, prepare=None, stat_paths=False):
    """Serve requests until stdin closes.  ``handlers``: {op: fn(req) -> reply} beyond ping
    (this worker's: signatures and launch); ``prepare``: called before the sandbox is entered
    (what must be imported or opened while files can still be read); ``stat_paths``: imports
    may run once sandboxed (normcheck.backends.cpu.sandbox.enter)."""
    global _ARENA, _TASKS
    if handlers is None:
        handlers = {"signatures": signatures, "launch": launch}
    parent = os.getppid()
    _ARENA = int(os.environ["NORMCHECK_ARENA_FD"])
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # keep the protocol stream clean: the kernel's printf goes to stderr
    proto = os.fdopen(os.dup(out.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), 1)
    _die_with_parent(parent)
    from normcheck.backends.cpu import sandbox

    if prepare is not None:
        prepare()
    _imported_from_where_normcheck_installs()
    try:
        _TASKS = os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        _TASKS = None  # no /proc: threads are bounded by the address space only
    state = sandbox.enter(os.environ.get("NORMCHECK_SANDBOX", "on"),
                          read_dirs=[d for d in os.environ.get("NORMCHECK_SANDBOX_READ", "").split(
                              os.pathsep) if d], report_page=_report_page(),
                          report_len=REPORT_BYTES,
                          address_space=int(os.environ.get("NORMCHECK_WORKER_AS", "0")),
                          cpu_seconds=int(os.environ.get("NORMCHECK_WORKER_CPU", "0")),
                          stat_paths=stat_paths)
    _watchdog(parent)  # after the sandbox: the thread inherits it
    _STREAMS[:] = [inp, proto]
    while True:
        head = _read(inp, wire.HEADER)
        if head is None:
            return
        req = wire.decode(_read(inp, wire.header_length(head)) or b"")
        _STREAMS[2:] = [req.get("seq")]
        op = req.get("op")
        if op == "ping":
            rep = {"ok": True, "sandbox": state}
        elif op in handlers:
            rep = handlers[op](req)
        else:
            rep = {"ok": False, "kind": "launch", "message": f"unknown request {op!r}"}
        rep["cpu"] = _cpu()
        rep["seq"] = _STREAMS[2]
        _send(proto, rep)


#: [requests in, replies out, the sequence number of the request being answered]
_STREAMS: list = []


def converse(rep: dict):
    """Within a handler: send ``rep`` as the reply to the request being answered and read the
    next request (normcheck's answer), which the handler goes on with; None when normcheck has
    closed the stream.  An op's host code asks normcheck to run each kernel launch this way
    (normcheck.backends.triton.opcall): one conversation, each message a request and its
    reply, their sequence numbers in step."""
    inp, proto = _STREAMS[0], _STREAMS[1]
    _send(proto, {**rep, "cpu": _cpu(), "seq": _STREAMS[2]})
    head = _read(inp, wire.HEADER)
    if head is None:
        return None
    req = wire.decode(_read(inp, wire.header_length(head)) or b"")
    _STREAMS[2] = req.get("seq")
    return req


if __name__ == "__main__":
    main()
