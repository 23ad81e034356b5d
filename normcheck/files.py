"""Reading a file whose size and kind are checked before a byte is read: a spec, a case, a
kernel source, a results.json and a scheduler file all come from users (or from anyone), so a
FIFO, a device or a 3 GiB file is a clear error naming the thing, never a hang or a memory
blow-up."""

from __future__ import annotations

import os

from normcheck.errors import invalid

__all__ = ["read_limited", "SOURCE_BYTES"]


#: The largest kernel source normcheck reads (headers it includes are the compiler's business).
SOURCE_BYTES = 16 << 20


def read_limited(path, what: str, limit: int, expected: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read without following it into
    a device or a FIFO (opened non-blocking, checked with fstat before a byte is read); anything
    else is an InvalidArgument naming ``what``, the path and the fix."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise invalid(what, str(path), expected, f"check the path ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if
                    stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
                    stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "not a regular file")
            raise invalid(what, str(path), f"{expected} (this is {kind})",
                          "name a regular file")
        if st.st_size > limit:
            raise invalid(what, str(path), f"{expected} of at most {limit >> 20} MiB (it has "
                          f"{st.st_size >> 20} MiB)", "name the right file")
        chunks, n = [], 0
        while True:
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
            if n > limit:
                raise invalid(what, str(path), f"{expected} of at most {limit >> 20} MiB",
                              "name the right file")
        return b"".join(chunks)
    except OSError as e:
        raise invalid(what, str(path), expected, f"it cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)
