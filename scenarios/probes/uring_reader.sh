#!/bin/sh
# uring_reader: a known-bad probe that reads the answer key through io_uring, where the
# strace witness cannot name the file: io_uring_setup, then an IORING_OP_OPENAT and an
# IORING_OP_READ submitted through the ring (raw syscalls from Python's ctypes; no liburing).
# The chamber's seccomp profile denies io_uring and the tracer fails each call with EPERM,
# so the attempt itself is in the ledger and containment.denied_syscall must report it.
# Where io_uring runs (no such profile), it prints the file's first bytes.
set -u
python3 - "${1:-benchmark/questions.toml}" <<'PY'
import ctypes, mmap, os, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SETUP, ENTER = 425, 426  # x86_64 and arm64 share the numbers of new syscalls
OP_OPENAT, OP_READ = 18, 22  # include/uapi/linux/io_uring.h
OFF_SQ_RING, OFF_CQ_RING, OFF_SQES = 0, 0x8000000, 0x10000000
AT_FDCWD, GETEVENTS = -100, 1


def call(*args):
    r = libc.syscall(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def main(path):
    params = ctypes.create_string_buffer(120)  # struct io_uring_params
    ring = call(SETUP, 4, params)
    sq_entries, cq_entries = struct.unpack_from("II", params, 0)
    sq_head, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("7I", params, 40)
    cq_head, cq_tail, cq_mask, _, _, cqes = struct.unpack_from("6I", params, 80)
    sq = mmap.mmap(ring, sq_array + 4 * sq_entries, offset=OFF_SQ_RING)
    cq = mmap.mmap(ring, cqes + 16 * cq_entries, offset=OFF_CQ_RING)
    sqes = mmap.mmap(ring, 64 * sq_entries, offset=OFF_SQES)
    sq_mask = struct.unpack_from("I", sq, sq_mask)[0]  # the offsets say where the values are
    cq_mask = struct.unpack_from("I", cq, cq_mask)[0]

    def submit(op, fd, addr, length, off=0, op_flags=0):
        tail = struct.unpack_from("I", sq, sq_tail)[0]
        i = tail & sq_mask
        sqe = struct.pack("<BBHiQQIIQ", op, 0, 0, fd, off, addr, length, op_flags, 1) + bytes(24)
        sqes[64 * i:64 * i + 64] = sqe
        struct.pack_into("I", sq, sq_array + 4 * i, i)
        struct.pack_into("I", sq, sq_tail, tail + 1)
        call(ENTER, ring, 1, 1, GETEVENTS, None, 0)
        head = struct.unpack_from("I", cq, cq_head)[0]
        res = struct.unpack_from("<Qi", cq, cqes + 16 * (head & cq_mask))[1]
        struct.pack_into("I", cq, cq_head, head + 1)
        if res < 0:
            raise OSError(-res, os.strerror(-res))
        return res

    name = ctypes.create_string_buffer(path.encode())
    fd = submit(OP_OPENAT, AT_FDCWD, ctypes.addressof(name), 0, op_flags=os.O_RDONLY)
    buf = ctypes.create_string_buffer(256)
    n = submit(OP_READ, fd, ctypes.addressof(buf), 256)
    print("read through io_uring:", buf.raw[:n].decode(errors="replace").splitlines()[:2])


try:
    main(sys.argv[1])
except OSError as exc:
    print("io_uring refused:", exc)
PY
echo "io_uring" > ANSWER.md
