"""A real FUSE mount whose one file can be looked up and opened but never read: what a
progress file on a hung NFS server or a stalled user FUSE daemon looks like to a reader.

Speaks the kernel's FUSE protocol on /dev/fuse directly (no libfuse): INIT, LOOKUP,
GETATTR, OPEN are answered, READ is left unanswered until `close()`, which aborts the
connection (every stuck read then fails) and detaches the mount. Needs root.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
from pathlib import Path

FUSE_LOOKUP, FUSE_FORGET, FUSE_GETATTR, FUSE_OPEN, FUSE_READ = 1, 2, 3, 14, 15
FUSE_RELEASE, FUSE_FLUSH, FUSE_INIT, FUSE_INTERRUPT, FUSE_BATCH_FORGET = 18, 25, 26, 36, 42
FUSE_OPENDIR, FUSE_RELEASEDIR, FUSE_ACCESS, FUSE_STATFS = 27, 29, 34, 17
IN_HEADER = struct.Struct("<IIQQIIII")  # len, opcode, unique, nodeid, uid, gid, pid, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ROOT, FILE = 1, 2
MNT_DETACH = 2


def _attr(ino: int, mode: int, size: int, uid: int) -> bytes:
    # ino, size, blocks, atime, mtime, ctime, 3 x nsec, mode, nlink, uid, gid, rdev,
    # blksize, flags
    return struct.pack(
        "<QQQQQQIIIIIIIIII", ino, size, 1, 0, 0, 0, 0, 0, 0, mode, 1, uid, 0, 0, 4096, 0
    )


class HungFs:
    """`HungFs(mountpoint, name, uid)`; the file is `mountpoint/name`."""

    def __init__(self, mountpoint: Path, name: str = "progress", uid: int = 0) -> None:
        self.mountpoint = Path(mountpoint)
        self.name = name.encode()
        self.uid = uid
        self.reads_waiting = 0
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_NONBLOCK)
        self._stop = threading.Event()
        libc = ctypes.CDLL(None, use_errno=True)
        self._libc = libc
        opts = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
        if libc.mount(b"hungfs", str(self.mountpoint).encode(), b"fuse", 0, opts) != 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"mount fuse on {self.mountpoint}: {os.strerror(err)}")
        self._thread = threading.Thread(target=self._serve, name="hungfs", daemon=True)
        self._thread.start()

    def _reply(self, unique: int, payload: bytes = b"", error: int = 0) -> None:
        try:
            os.write(
                self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), error, unique) + payload
            )
        except OSError:
            pass  # the request was interrupted, or the connection is gone

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(100):
                continue
            try:
                req = os.read(self.fd, 1 << 20 | 8192)
            except OSError as exc:
                if exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                return  # ENODEV: unmounted / aborted
            _, op, unique, node, *_ = IN_HEADER.unpack_from(req)
            arg = req[IN_HEADER.size :]
            if op == FUSE_INIT:
                major, minor, readahead, flags = struct.unpack_from("<IIII", arg)
                out = struct.pack(
                    "<IIIIHHIIHHI7I", 7, 31, readahead, 0, 16, 16, 1 << 17, 1, 32, 0, 0, *[0] * 7
                )
                self._reply(unique, out)
            elif op == FUSE_GETATTR:
                attr = self._node_attr(node)
                self._reply(unique, struct.pack("<QII", 3600, 0, 0) + attr)
            elif op == FUSE_LOOKUP:
                if node == ROOT and arg.rstrip(b"\0") == self.name:
                    entry = struct.pack("<QQQQII", FILE, 1, 3600, 3600, 0, 0)
                    self._reply(unique, entry + self._node_attr(FILE))
                else:
                    self._reply(unique, error=-errno.ENOENT)
            elif op in (FUSE_OPEN, FUSE_OPENDIR):
                self._reply(unique, struct.pack("<QII", 1, 0, 0))
            elif op == FUSE_READ:
                self.reads_waiting += 1  # never answered: the read hangs
            elif op in (FUSE_RELEASE, FUSE_RELEASEDIR, FUSE_FLUSH, FUSE_ACCESS):
                self._reply(unique)
            elif op in (FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT):
                pass  # no reply expected
            else:
                self._reply(unique, error=-errno.ENOSYS)

    def _node_attr(self, node: int) -> bytes:
        if node == ROOT:
            return _attr(ROOT, 0o040755, 0, 0)
        return _attr(FILE, 0o100644, 4096, self.uid)

    def close(self) -> None:
        """Abort the connection (stuck reads fail with ENOTCONN) and detach the mount."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(5)  # its read must return first: it holds the device open
        self._libc.umount2(str(self.mountpoint).encode(), MNT_DETACH)
        os.close(self.fd)  # the last reference: the kernel aborts the connection
