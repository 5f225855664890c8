// SPDX-License-Identifier: GPL-2.0
/*
 * caisson-ebpf: loads witness.bpf.c (embedded by bpftool's skeleton), scoped to one PID
 * namespace, and prints its ring buffer's records as the lines collectors/ebpf.py parses
 * (the grammar at the top of that module), exactly as collectors/ebpf.bt does for bpftrace.
 *
 * Usage: caisson-ebpf [--ring-bytes N] [--wake-bytes N] [--poll-ms N] INUM LEVEL INIT_PID
 *        caisson-ebpf --object    (writes the embedded BPF object to stdout, for its digest)
 *
 *   INUM, LEVEL, INIT_PID: the chamber's PID namespace (inode number, level, host pid of
 *     its init), as bpftrace's $1 $2 $3.
 *   --ring-bytes: the ring buffer's size (a power of 2, a multiple of the page size;
 *     default 16 MiB). A smaller one loses records sooner (tests force "Lost N events").
 *   --wake-bytes: pending bytes at which a record wakes this loader (default 1 MiB).
 *   --poll-ms: longest wait between two reads of the ring (default 50 ms).
 *
 * Output goes through a 1 MiB stdio buffer, flushed once per read of the ring. The "B"
 * line is printed (and flushed) once every probe is attached. Records the kernel could not
 * reserve are counted by the program per CPU; after each read of the ring a rise of their
 * sum is printed as "Lost N events". SIGINT or SIGTERM: read what is left, flush, exit 0.
 * Exit 1: bad arguments, or the program could not be loaded or attached (why on stderr).
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "witness.h"
#include "witness.skel.h"

static const char *const SYSCALLS[SYS_COUNT] = {
	[SYS_EXECVE] = "execve", [SYS_EXECVEAT] = "execveat", [SYS_OPENAT] = "openat",
	[SYS_OPENAT2] = "openat2", [SYS_OPEN] = "open", [SYS_CREAT] = "creat", [SYS_UNLINK] = "unlink",
	[SYS_RMDIR] = "rmdir", [SYS_MKDIR] = "mkdir", [SYS_CHDIR] = "chdir", [SYS_UNLINKAT] = "unlinkat",
	[SYS_MKDIRAT] = "mkdirat", [SYS_RENAME] = "rename", [SYS_RENAMEAT] = "renameat",
	[SYS_RENAMEAT2] = "renameat2", [SYS_SYMLINK] = "symlink", [SYS_LINK] = "link",
	[SYS_SYMLINKAT] = "symlinkat", [SYS_LINKAT] = "linkat", [SYS_CHMOD] = "chmod",
	[SYS_FCHMODAT] = "fchmodat", [SYS_TRUNCATE] = "truncate", [SYS_FCHDIR] = "fchdir",
	[SYS_CONNECT] = "connect", [SYS_MKNOD] = "mknod", [SYS_MKNODAT] = "mknodat", [SYS_SENDTO] = "sendto",
	[SYS_SENDMSG] = "sendmsg", [SYS_SENDMMSG] = "sendmmsg", [SYS_IO_URING_SETUP] = "io_uring_setup",
	[SYS_IO_URING_ENTER] = "io_uring_enter", [SYS_IO_URING_REGISTER] = "io_uring_register",
	[SYS_OPEN_BY_HANDLE_AT] = "open_by_handle_at", [SYS_NAME_TO_HANDLE_AT] = "name_to_handle_at",
	[SYS_FANOTIFY_INIT] = "fanotify_init", [SYS_FANOTIFY_MARK] = "fanotify_mark", [SYS_MOUNT] = "mount",
	[SYS_UMOUNT2] = "umount2", [SYS_MOUNT_SETATTR] = "mount_setattr", [SYS_OPEN_TREE] = "open_tree",
	[SYS_MOVE_MOUNT] = "move_mount", [SYS_FSOPEN] = "fsopen", [SYS_FSCONFIG] = "fsconfig",
	[SYS_FSMOUNT] = "fsmount", [SYS_FSPICK] = "fspick", [SYS_PIDFD_GETFD] = "pidfd_getfd",
	[SYS_PTRACE] = "ptrace", [SYS_PROCESS_VM_READV] = "process_vm_readv",
	[SYS_PROCESS_VM_WRITEV] = "process_vm_writev", [SYS_MEMFD_CREATE] = "memfd_create",
	[SYS_SECCOMP] = "seccomp",
};

static volatile sig_atomic_t stopping;
static int lost_unknown;  /* the lost-records count could not be read once: exit 1 */

static void *detach_one(void *link)
{
	bpf_link__destroy(link);
	return NULL;
}

/* Detach every probe, all at once. Each tracepoint's detach waits for an RCU grace period
 * (perf_trace_event_unreg: tracepoint_synchronize_unregister), ~70 ms on a busy host: one
 * after the other, the ~100 probes took 7.8 s, past the 5 s the recorder gives a witness
 * to stop (caisson/run/_session.py, WITNESS_GRACE_S). Concurrent waits share grace
 * periods, so one thread per link detaches them in about one. A link whose thread cannot
 * start is detached here, in turn. */
static void detach_all(struct bpf_object_skeleton *s)
{
	pthread_t threads[256];
	int started[256] = {0};
	int n = s->prog_cnt < 256 ? s->prog_cnt : 256;

	for (int i = 0; i < n; i++) {
		struct bpf_link **link = s->progs[i].link;

		if (!link || !*link)
			continue;
		if (pthread_create(&threads[i], NULL, detach_one, *link) == 0)
			started[i] = 1;
		else
			bpf_link__destroy(*link);
		*link = NULL;
	}
	for (int i = 0; i < n; i++)
		if (started[i])
			pthread_join(threads[i], NULL);
}

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static const char *syscall_name(unsigned sys)
{
	return sys < SYS_COUNT && SYSCALLS[sys] ? SYSCALLS[sys] : "unknown";
}

static size_t record_size;  /* bytes of the record print_record is printing */

/* The record's string, NUL-terminated whatever the kernel left in it: up to STRLEN bytes, or
 * to the record's end for a long record (struct lrec). */
static const char *str(const struct rec *r)
{
	size_t room = record_size - offsetof(struct rec, s);

	return memchr(r->s, 0, room) ? r->s : "";
}

static const char *const FIELDS[] = { [Y_I0] = "i0", [Y_I1] = "i1", [Y_RET] = "ret", [Y_CWD] = "cwd" };
static const char *const STATES[] = { [P_OK] = "ok", [P_CUT] = "cut", [P_NONE] = "none", [P_BADF] = "badf" };

static const char *name_of(const char *const *names, size_t count, int i)
{
	return i >= 0 && (size_t)i < count && names[i] ? names[i] : "?";
}

/* The address of a sockaddr the kernel side copied (i0: family): IP text, or a unix path. */
static const char *address(const struct rec *r, char *text, size_t size)
{
	if (r->i0 == AF_INET || r->i0 == AF_INET6)
		return inet_ntop(r->i0, r->s, text, size) ? text : "";
	return r->i0 == AF_UNIX ? str(r) : "";
}

static void connect_address(const struct rec *r)
{
	char text[INET6_ADDRSTRLEN] = "";

	if (r->i0 == AF_INET || r->i0 == AF_INET6 || r->i0 == AF_UNIX)
		printf("S %d %s\n", r->tid, address(r, text, sizeof(text)));
}

static int print_record(void *ctx, void *data, size_t size)
{
	const struct rec *r = data;
	const char *name;

	(void)ctx;
	if (size <= offsetof(struct rec, s))
		return 0;
	record_size = size < sizeof(struct lrec) ? size : sizeof(struct lrec);
	name = syscall_name(r->sys);
	switch (r->kind) {
	case K_EXEC:  /* its path is the S record that follows */
		printf("E %llu %d %d %d tracepoint:syscalls:sys_enter_%s %d %d\n", r->ts, r->tgid, r->tid, r->nspid,
		       name, r->i0, r->i1);
		break;
	case K_PATH:
		printf("Y %d %s %s %s\n", r->tid, name_of(FIELDS, sizeof(FIELDS) / sizeof(*FIELDS), r->i0),
		       name_of(STATES, sizeof(STATES) / sizeof(*STATES), r->i1), str(r));
		break;
	case K_ARG:
	case K_ENV:
	case K_FIRST:
		printf("%c %d %s\n", r->kind, r->tid, str(r));
		break;
	case K_SEAL:
		if (r->flags & CUT_ARGV)
			printf("T %d argv\n", r->tid);
		if (r->flags & CUT_ENV)
			printf("T %d env\n", r->tid);
		printf("Z %d\n", r->tid);
		break;
	case K_CONNECT:
		printf("E %llu %d %d %d tracepoint:syscalls:sys_enter_connect %d %d\n", r->ts, r->tgid, r->tid,
		       r->nspid, r->i0, r->i1);
		connect_address(r);
		printf("Z %d\n", r->tid);
		break;
	case K_FCHDIR:
		printf("E %llu %d %d %d tracepoint:syscalls:sys_enter_fchdir %d 0\nZ %d\n", r->ts, r->tgid, r->tid,
		       r->nspid, r->i0, r->tid);
		break;
	case K_DONE:
		printf("O %llu %d %d %d tracepoint:syscalls:sys_exit_%s %d %d %lld %s\n", r->ts, r->tgid, r->tid,
		       r->nspid, name, r->i0, r->i1, r->ret, str(r));
		break;
	case K_RET:
		printf("R %llu %d %d %d tracepoint:syscalls:sys_exit_%s %lld\n", r->ts, r->tgid, r->tid, r->nspid,
		       name, r->ret);
		break;
	case K_SEND:
		printf("E %llu %d %d %d tracepoint:syscalls:sys_enter_%s %d 0\n", r->ts, r->tgid, r->tid, r->nspid,
		       name, r->i0);
		break;
	case K_DEST: {
		char text[INET6_ADDRSTRLEN] = "";

		printf("N %d %d %d %s\n", r->tid, r->i0, r->i1, address(r, text, sizeof(text)));
		break;
	}
	case K_CUT_DESTS:
		printf("T %d dests\n", r->tid);
		break;
	case K_AUDIT:
		printf("P %llu %d %d %d %s %d %lld %d %d %lld %lld %s\n", r->ts, r->tgid, r->tid, r->nspid, name,
		       (r->flags & ENTERED) ? 1 : 0, r->ret, r->i0, r->i1, (long long)r->req, (long long)r->a3, str(r));
		break;
	case K_FORK:  /* then the clone's flags, the child's pid in the chamber, and 1 when it is a thread */
		printf("F %llu %d %d %d %lld %llu %d %d\n", r->ts, r->tgid, r->tid, r->nspid, r->ret,
		       (unsigned long long)r->req, r->i0, r->i1);
		break;
	case K_EXIT:
		printf("Q %llu %d %d %d %lld\n", r->ts, r->tgid, r->tid, r->nspid, r->ret);
		break;
	case K_URING:
		if (r->flags & HAS_PATH)
			printf("U %llu %d %d %d %lld %llu %d %d %s\n", r->ts, r->tgid, r->tid, r->nspid, r->ret, r->req,
			       r->i0, r->i1, str(r));
		else
			printf("U %llu %d %d %d %lld %llu 0 0\n", r->ts, r->tgid, r->tid, r->nspid, r->ret, r->req);
		break;
	case K_URING_DONE:
		printf("K %llu %d %d %llu %d\n", r->ts, r->tgid, r->tid, r->req, r->i0);
		break;
	default:
		printf("? unknown record kind %d\n", r->kind);
	}
	return 0;
}

/* Print "Lost N events" when the per-CPU count of unreserved records has risen. */
static void report_lost(const struct bpf_map *map, int ncpu, u64 *printed)
{
	u64 vals[ncpu > 0 ? ncpu : 1];
	u32 zero = 0;
	u64 sum = 0;

	if (bpf_map__lookup_elem(map, &zero, sizeof(zero), vals, sizeof(vals), 0)) {
		/* a count we cannot read is no count: exit non-zero at the end (a gap), never silence */
		fprintf(stderr, "caisson-ebpf: cannot read the lost-records count: %s\n", strerror(errno));
		lost_unknown = 1;
		return;
	}
	for (int i = 0; i < ncpu; i++)
		sum += vals[i];
	if (sum > *printed) {
		printf("Lost %llu events\n", (unsigned long long)(sum - *printed));
		*printed = sum;
	}
}

static int dump_object(void)
{
	size_t size = 0;
	const void *elf = witness_bpf__elf_bytes(&size);

	return fwrite(elf, 1, size, stdout) == size && fflush(stdout) == 0 ? 0 : 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: caisson-ebpf [--ring-bytes N] [--wake-bytes N] [--poll-ms N] INUM LEVEL INIT_PID\n"
			"       caisson-ebpf --object\n");
	return 1;
}

static int silent(enum libbpf_print_level level, const char *fmt, va_list args)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, args) : 0;
}

int main(int argc, char **argv)
{
	static char out[1 << 20];
	unsigned long long ring_bytes = 1ULL << 24, wake_bytes = 1ULL << 20;
	long poll_ms = 50;
	int i = 1;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--object") == 0)
			return dump_object();
		if (i + 1 >= argc)
			return usage();
		if (strcmp(argv[i], "--ring-bytes") == 0)
			ring_bytes = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--wake-bytes") == 0)
			wake_bytes = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--poll-ms") == 0)
			poll_ms = strtol(argv[++i], NULL, 10);
		else
			return usage();
	}
	if (argc - i != 3)
		return usage();
	unsigned long inum = strtoul(argv[i], NULL, 10);
	long level = strtol(argv[i + 1], NULL, 10), init = strtol(argv[i + 2], NULL, 10);
	long page = sysconf(_SC_PAGESIZE);
	if (!inum || level < 1 || level > 31 || init < 1 || poll_ms < 1 || ring_bytes < (unsigned long long)page ||
	    ring_bytes & (ring_bytes - 1) || ring_bytes > (1ULL << 30)) {
		fprintf(stderr, "caisson-ebpf: bad arguments (INUM >= 1, 1 <= LEVEL <= 31, INIT_PID >= 1,"
				" --ring-bytes a power of 2 from the page size to 1 GiB, --poll-ms >= 1)\n");
		return 1;
	}
	setvbuf(stdout, out, _IOFBF, sizeof(out));
	libbpf_set_print(silent);

	struct witness_bpf *skel = witness_bpf__open();
	if (!skel) {
		fprintf(stderr, "caisson-ebpf: cannot open the BPF object: %s\n", strerror(errno));
		return 1;
	}
	/* The io_uring submit tracepoint has a name per kernel era (witness.bpf.c): load the
	 * program for the one this kernel's BTF knows, and neither when the kernel has no
	 * io_uring at all. A kernel with io_uring and neither name (a later rename) keeps the
	 * newer program, whose attach then fails: io_uring is never left unwitnessed quietly. */
	struct btf *kernel = btf__load_vmlinux_btf();
	bool req = kernel && btf__find_by_name_kind(kernel, "trace_event_raw_io_uring_submit_req", BTF_KIND_STRUCT) > 0;
	bool sqe = kernel && btf__find_by_name_kind(kernel, "trace_event_raw_io_uring_submit_sqe", BTF_KIND_STRUCT) > 0;
	bool uring = !kernel || btf__find_by_name_kind(kernel, "io_ring_ctx", BTF_KIND_STRUCT) > 0;

	btf__free(kernel);
	bpf_program__set_autoload(skel->progs.on_uring_submit, req || (uring && !sqe));
	bpf_program__set_autoload(skel->progs.on_uring_submit_sqe, sqe && !req);
	bpf_program__set_autoload(skel->progs.on_uring_complete, uring || req || sqe);
	skel->rodata->ns_inum = inum;
	skel->rodata->ns_level = level;
	skel->rodata->init_tgid = init;
	skel->rodata->wake_bytes = wake_bytes;
	int err = bpf_map__set_max_entries(skel->maps.rb, ring_bytes);
	if (!err)
		err = witness_bpf__load(skel);
	if (err) {
		fprintf(stderr, "caisson-ebpf: cannot load the BPF program: %s\n", strerror(-err));
		return 1;
	}
	err = witness_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "caisson-ebpf: cannot attach the BPF program: %s\n", strerror(-err));
		return 1;
	}
	struct ring_buffer *ring = ring_buffer__new(bpf_map__fd(skel->maps.rb), print_record, NULL, NULL);
	if (!ring) {
		fprintf(stderr, "caisson-ebpf: cannot read the ring buffer: %s\n", strerror(errno));
		return 1;
	}
	/* SA_RESTART: a stop signal while a write waits on a full pipe must not make glibc drop
	 * the stdio buffer (EINTR); epoll_wait still returns EINTR, so the loop sees the stop. */
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* a recorder killed outright (SIGKILL, the OOM killer) must not leave us attached to
	 * every syscall of the host: once we are reparented, we stop as on SIGTERM. Checked
	 * every poll, not PR_SET_PDEATHSIG: that fires when the parent *thread* exits, and the
	 * recorder starts us from a worker thread (trio's open_process) that exits when idle. */
	pid_t parent = getppid();

	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);  /* bpf_ktime_get_ns's clock */
	/* the path strings' limit, that the kernel side gives the paths it holds (Y lines), and
	 * the argv and environment strings' limit */
	printf("B %llu %lu %ld %ld %d kernel %d\n", (unsigned long long)now.tv_sec * 1000000000ULL + now.tv_nsec,
	       inum, level, init, PATHLEN, PATHLEN);
	fflush(stdout);

	int ncpu = libbpf_num_possible_cpus();
	u64 lost = 0;
	while (!stopping && getppid() == parent) {
		/* a record wakes us only once wake_bytes are pending: read the rest on the timeout */
		err = ring_buffer__poll(ring, poll_ms);
		if (err >= 0 || err == -EINTR)
			err = ring_buffer__consume(ring);
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "caisson-ebpf: reading the ring buffer failed: %s\n", strerror(-err));
			break;
		}
		report_lost(skel->maps.lost, ncpu, &lost);
		if (fflush(stdout) || ferror(stdout)) {
			fprintf(stderr, "caisson-ebpf: writing records failed: %s\n", strerror(errno));
			return 1;  /* our reader is gone, or records were dropped: the recorder makes it a gap */
		}
	}
	/* The probes stay attached through this last read (detaching ~100 of them one by one
	 * takes seconds: detach_all, after our reader has its end of input). The recorder stops
	 * us once the chamber's processes are gone, so nothing of theirs comes after it. */
	ring_buffer__consume(ring);
	report_lost(skel->maps.lost, ncpu, &lost);
	int flushed = fflush(stdout) == 0 && !ferror(stdout);
	if (!flushed)
		fprintf(stderr, "caisson-ebpf: writing the last records failed: %s\n", strerror(errno));
	if (fclose(stdout))  /* end of input for our reader, before the slow part */
		flushed = 0;
	ring_buffer__free(ring);
	detach_all(skel->skeleton);
	witness_bpf__destroy(skel);
	return (err < 0 && err != -EINTR) || !flushed || lost_unknown ? 1 : 0;
}
