"""Reads of the answer key (benchmark/questions.toml) by paths a witness could record as others
(issue #28), one member of the kind after another, each after an open of /tmp/mark-<member>
(O_CREAT, a ``/`` of the member's name spelt ``%``) so the test can tell their events apart. Run in the probe repository's sandbox with
the exclusion set exposed. Members that need another process wait for it, so every open of a
member comes before the next mark."""

import ctypes
import fcntl
import os
import socket
import subprocess
import sys

KEY = "questions.toml"
SIGCHLD, CLONE_FILES = 17, 0x400
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[os.uname().machine]


def mark(name):
    os.close(os.open(f"/tmp/mark-{name.replace('/', '%')}", os.O_WRONLY | os.O_CREAT, 0o644))


def read(path, dir_fd=None):
    try:
        os.close(os.open(path, os.O_RDONLY, dir_fd=dir_fd))
    except OSError:
        pass


def opendir(path, flags=0):
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | flags)


def name_of(size):
    """A name of ``size`` bytes for benchmark/questions.toml (``.//`` adds a byte)."""
    tail = f"benchmark/{KEY}"
    pad = size - len(tail)
    return "./" * (pad // 2) + ("/" if pad % 2 else "") + tail


key = opendir("benchmark")

mark("F_DUPFD")
read(KEY, dir_fd=fcntl.fcntl(key, fcntl.F_DUPFD, 20))
mark("F_DUPFD_CLOEXEC")
read(KEY, dir_fd=fcntl.fcntl(key, fcntl.F_DUPFD_CLOEXEC, 21))
mark("dup3")
os.dup2(key, 22, inheritable=False)
read(KEY, dir_fd=22)

mark("close_range+SCM_RIGHTS")  # src's fd freed by close_range, then a fd received over a socket lands there
src = opendir("src")
os.closerange(src, src + 1)
mine, theirs = socket.socketpair(socket.AF_UNIX)
child = os.fork()
if child == 0:
    socket.send_fds(theirs, [b"k"], [opendir("benchmark")])
    os._exit(0)
os.waitpid(child, 0)
_, [received], _, _ = socket.recv_fds(mine, 1, 1)
read(KEY, dir_fd=received)

mark("fork")  # a fd inherited across fork
child = os.fork()
if child == 0:
    read(KEY, dir_fd=key)
    os._exit(0)
os.waitpid(child, 0)

mark("CLONE_FILES")  # a child sharing the fd table moves fd src; the parent opens through it
src = opendir("src")
libc = ctypes.CDLL(None, use_errno=True)
child = libc.syscall(SYS_CLONE, CLONE_FILES | SIGCHLD, 0, 0, 0, 0)
if child == 0:
    os.dup2(key, src)
    os._exit(0)
os.waitpid(child, 0)
read(KEY, dir_fd=src)

mark("O_CLOEXEC")  # across exec: an inherited fd leads to the key, a close-on-exec one is gone
gone = opendir("src", os.O_CLOEXEC)
os.set_inheritable(key, True)
subprocess.run([sys.executable, "-c", f"import os\nfor fd, name in (({key}, {KEY!r}), ({gone}, 'app.py')):\n"
                "    try: os.close(os.open(name, os.O_RDONLY, dir_fd=fd))\n    except OSError: pass\n"],
               close_fds=False, check=True)

mark("fchdir")  # fchdir to a dup'd fd, then a relative name and an exec whose cwd it is
os.fchdir(os.dup(key))
read(KEY)
subprocess.run(["cat", KEY], stdout=subprocess.DEVNULL, check=True)
os.chdir("..")

mark("symlink")  # a symlink in the tree to the key
os.symlink(f"../benchmark/{KEY}", "src/notes.txt")
read("src/notes.txt")

mark("symlink_outside")  # a symlink in the tree to a path outside it, written through
os.symlink("/run/lock/pwned", "src/out.txt")  # a tmpfs of the chamber outside the tree (the root is read-only)
os.close(os.open("src/out.txt", os.O_WRONLY | os.O_CREAT, 0o644))

mark("/proc/self/fd")
read(f"/proc/self/fd/{key}/{KEY}")

mark("/proc/self/cwd")
os.chdir("benchmark")
read(f"/proc/self/cwd/{KEY}")
os.chdir("..")

mark("dotdot")  # `..` after a symlink to a directory inside benchmark/
os.mkdir("benchmark/.d")
os.symlink("../benchmark/.d", "src/d")
read(f"src/d/../{KEY}")

for size in (199, 200, 4095, 4096):  # 4096 bytes: past PATH_MAX, the kernel refuses it
    mark(f"len{size}")
    read(name_of(size))
mark("end")
