#!/bin/sh
# Re-record the golden strace files of tests/collectors/test_strace.py from real programs.
#
# Run as root on Linux with strace 6.x (recorded with strace 6.1, Debian 12, x86_64):
#     sh tests/collectors/test_strace/record_golden.sh
# The options are exactly those of collectors.strace.strace_argv() (string limit 4096),
# except escapes.strace, recorded with -s 32 so long strings and argv arrays are cut.
# Each program runs with a minimal environment in a scratch directory, W=/tmp/caisson-golden,
# which is the root_cwd the tests pass to the parser. Pids and times differ on every run:
# re-recording means updating the exact expectations in test_strace.py.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
PY=$ROOT/.venv/bin/python
W=/tmp/caisson-golden
rm -rf "$W"; mkdir -p "$W"; cd "$W"

opts() {  # the witness's strace options, with an optional string limit and -v (verbose_env)
    "$PY" -c 'import sys; from collectors.strace import strace_argv
print("\n".join(strace_argv(sys.argv[1], string_limit=int(sys.argv[2]), verbose_env=sys.argv[3] == "v")))' \
        "$1" "${2:-4096}" "${3:-}"
}
trace() {  # trace NAME LIMIT -- COMMAND...
    name=$1; limit=$2; shift 3
    out="$HERE/$name.strace"
    # shellcheck disable=SC2046
    (IFS='
'; env -i PATH=/usr/bin:/bin LC_ALL=C strace $(opts "$out" "$limit") "$@") || true
}

# 1. a shell pipeline: fork/vfork, exec, redirection (O_CREAT), chdir, a relative open, rm.
trace pipeline 4096 -- /bin/sh -c 'ls / | grep -c e > /tmp/caisson-golden/x; cat /etc/hostname; cd /tmp && cat caisson-golden/x; rm caisson-golden/x; exit 3'

# 2. python threads (clone3 CLONE_THREAD, unfinished/resumed pairs), subprocesses from
#    threads, an execve from a non-leader thread ("<pid changed to ...>", "superseded").
cat > threads.py <<'PY'
import os, subprocess, threading
def work(i):
    open("/etc/hostname").read()
    subprocess.run(["/bin/true", str(i)])
ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
os.chdir("/tmp")  # shared by every thread (CLONE_FS)
def ex():
    os.execv("/bin/sh", ["sh", "-c", "cat caisson-golden/threads.py > /dev/null; exit 7"])
threading.Thread(target=ex).start()
threading.Event().wait(10)
PY
trace python_threads 4096 -- /usr/bin/python3 -S threads.py

# 3. connect: refused (closed port), accepted (listening port), non-blocking EINPROGRESS,
#    IPv6 loopback, a unix socket, and a bind.
cat > connect.py <<'PY'
import socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
port = srv.getsockname()[1]
closed = socket.socket(); closed.bind(("127.0.0.1", 0)); dead = closed.getsockname()[1]; closed.close()
s = socket.socket()
try: s.connect(("127.0.0.1", dead))
except OSError: pass
s = socket.socket(); s.connect(("127.0.0.1", port))
nb = socket.socket(); nb.setblocking(False)
try: nb.connect(("127.0.0.1", port))
except BlockingIOError: pass
try:
    s6 = socket.socket(socket.AF_INET6); s6.connect(("::1", dead))
except OSError: pass
u = socket.socket(socket.AF_UNIX)
try: u.connect("/tmp/caisson-golden/no-such.sock")
except OSError: pass
PY
trace connect 4096 -- /usr/bin/python3 -S connect.py

# 4. killed: a child killed by SIGKILL while blocked in openat on a FIFO (= ? <unavailable>),
#    a child that dies of SIGABRT, and an openat interrupted by a signal (ERESTARTSYS).
mkfifo fifo
cat > killed.py <<'PY'
import os, signal, subprocess, time
p = subprocess.Popen(["/bin/cat", "/tmp/caisson-golden/fifo"])
time.sleep(0.3); p.kill(); p.wait()
subprocess.run(["/usr/bin/python3", "-S", "-c", "import os; os.abort()"])
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.2)
pid = os.fork()
if pid == 0:
    time.sleep(0.5); fd = os.open("/tmp/caisson-golden/fifo", os.O_WRONLY); os._exit(0)
os.open("/tmp/caisson-golden/fifo", os.O_RDONLY)  # interrupted once, then retried (PEP 475)
os.waitpid(pid, 0)
PY
trace killed 4096 -- /usr/bin/python3 -S killed.py

# 5. escapes and truncation (-s 32): non-ASCII, newline, quote, backslash, tab, '<>' in a
#    -yy decoration, a non-UTF-8 byte, openat on a dirfd, fchdir, file changes, a long
#    argv string ("..."), an argv array cut at 32 elements ([..., ...]).
cat > escapes.py <<'PY'
import os
d = "/tmp/caisson-golden/esc"
os.mkdir(d)
for n in ["caf\u00e9.txt", "new\nline", "quo\"te", "back\\slash", "tab\there", "a>b<c"]:
    open(os.path.join(d, n), "w").close()
os.close(os.open(b"/tmp/caisson-golden/esc/bad\xff", os.O_CREAT | os.O_WRONLY, 0o644))
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
os.close(os.open("caf\u00e9.txt", os.O_RDONLY, dir_fd=dfd))
os.chdir(dfd)
open("tab\there", "r+").close()
os.rename("quo\"te", "renamed")
os.link("renamed", "hard")
os.symlink("renamed", "soft")
os.chmod("soft", 0o600)
os.truncate("hard", 0)
os.unlink("soft")
os.mkdir("sub"); os.rmdir("sub")
try: os.execv("/no/such/prog", ["prog"] + ["arg%d" % i for i in range(40)])
except OSError: pass
os.execv("/bin/echo", ["echo", "y" * 100])
PY
trace escapes 32 -- /usr/bin/python3 -S escapes.py

# 6. sends without connect: unconnected UDP sendto and sendmsg, sendmmsg naming two
#    destinations (ctypes), a send on a connected socket (no destination), TCP Fast Open.
cat > sends.py <<'PY'
import ctypes, socket
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.sendto(b"ping", ("127.0.0.1", 9))
udp.sendmsg([b"ping"], [], 0, ("127.0.0.2", 9))
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
class Hdr(ctypes.Structure):  # struct msghdr
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iov)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class Msg(ctypes.Structure):  # struct mmsghdr
    _fields_ = [("hdr", Hdr), ("len", ctypes.c_uint)]
def sin(host, port):
    return ctypes.create_string_buffer(b"\x02\x00" + port.to_bytes(2, "big") + socket.inet_aton(host) + bytes(8), 16)
data = ctypes.create_string_buffer(b"pong")
iov = Iov(ctypes.addressof(data), 4)
names = [sin("127.0.0.3", 53), sin("127.0.0.4", 53)]
msgs = (Msg * 2)(*[Msg(Hdr(ctypes.addressof(n), 16, ctypes.pointer(iov), 1, None, 0, 0), 0) for n in names])
libc = ctypes.CDLL(None, use_errno=True)
libc.sendmmsg(udp.fileno(), msgs, 2, 0)
udp.connect(("127.0.0.1", 9)); udp.send(b"connected")
tcp = socket.socket()
try: tcp.sendto(b"GET / HTTP/1.0\r\n\r\n", socket.MSG_FASTOPEN, ("127.0.0.1", 9))
except OSError: pass
PY
trace sends 4096 -- /usr/bin/python3 -S sends.py

# 7. the audited calls: io_uring_setup and name_to_handle_at (failed by strace itself:
#    "(INJECTED)"), memfd_create + execveat(fd, "", AT_EMPTY_PATH) (fexecve), mknodat,
#    ptrace(PTRACE_TRACEME) (already traced: EPERM), process_vm_readv of itself; then
#    a child that exits 130 and one killed by SIGINT (issue 15, item 7).
cat > audit.py <<'PY'
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall(425, 4, ctypes.create_string_buffer(120))  # io_uring_setup
libc.syscall(303, -100, b"/etc/hostname", ctypes.create_string_buffer(136), ctypes.byref(ctypes.c_int()), 0)
fd = os.memfd_create("payload")
os.write(fd, open("/bin/true", "rb").read())
if os.fork() == 0:
    os.execve(fd, ["true"], {})
os.wait()
os.mkfifo("/tmp/caisson-golden/fifo2")
libc.ptrace(0, 0, None, None)  # PTRACE_TRACEME
buf = ctypes.create_string_buffer(8)
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
local, remote = Iov(ctypes.addressof(buf), 8), Iov(ctypes.addressof(buf), 8)
libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
subprocess.run(["/bin/sh", "-c", "exit 130"])
subprocess.run(["/bin/sh", "-c", "kill -INT $$"])
PY
trace audit 4096 -- /usr/bin/python3 -S audit.py

# 8. the witness's -v: exec'd environments with a credential variable, a scenario-declared
#    one (MY_ORG_*), a URL with a password, and a short-lived child (vfork, exec, exit)
#    whose lines come before its parent's vfork returns. Recorded with strace 6.1 (Debian 12).
out="$HERE/env.strace"
# shellcheck disable=SC2046
(IFS='
'; env -i PATH=/usr/bin:/bin LC_ALL=C ANTHROPIC_API_KEY=sk-ant-api03-not-a-real-key MY_ORG_ID=org-42 \
    GREETING=hello strace $(opts "$out" 4096 v) /bin/sh -c \
    'PROXY_URL=http://user:pw@proxy.example/ /bin/true; exec /bin/echo done') || true

# 9. secrets in command lines (redact_argv): a URL's userinfo in a shell assignment, a
#    curl-style Authorization header and key-shaped token, key options with '=' and alone.
out="$HERE/argv.strace"
# shellcheck disable=SC2046
(IFS='
'; env -i PATH=/usr/bin:/bin LC_ALL=C strace $(opts "$out" 4096 v) /bin/sh -c \
    'X=http://user:pw@proxy.example/ /bin/true; exec /bin/echo -H "Authorization: Bearer sk-proj-notarealkey0123456789" --api-key=k3y-not-real --password hunter2 https://example.com/') || true

rm -rf "$W"
ls -l "$HERE"/*.strace
