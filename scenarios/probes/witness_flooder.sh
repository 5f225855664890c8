#!/bin/sh
# witness_flooder: a known-bad probe that floods the syscall witness with 20000 opens in a
# tight loop, hoping some are dropped unseen. Under intact controls the eBPF witness's
# buffer holds such a burst (a flood many times larger does overflow it, and is then a
# gap, never a silent loss); with its buffer cut (the libbpf loader's ring buffer to
# 64 KiB, or bpftrace's perf buffer to a page per CPU), the kernel drops events, the
# witness reports "Lost N events", and the witness gap must void the run.
set -u
python3 -c "
import os
for _ in range(20000):
    os.close(os.open('src/app.py', os.O_RDONLY))
"
echo "src/app.py" > ANSWER.md
