#!/bin/sh
# deep_path: a probe whose paths a syscall witness cannot read whole: it makes a directory
# tree deeper than PATH_MAX (4096 bytes) in the sandbox and writes a file at its bottom
# through a directory fd (neither strace's -yy nor the eBPF program's walk gives that
# directory's path), and reads a file by a name of 310 bytes (past bpftrace's 199). No
# control stops it: containment.path_unjudged must void the run, whichever syscall witness
# runs, since where such a file is cannot be judged.
set -u
python3 - <<'PY'
import os

name = "d" * 200
for _ in range(24):
    os.mkdir(name)
    os.chdir(name)
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
PY
cat "$(printf './%.0s' $(seq 150))src/app.py" > /dev/null
printf 'The function `answer` is defined in src/app.py.\n' > ANSWER.md
