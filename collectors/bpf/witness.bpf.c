// SPDX-License-Identifier: GPL-2.0
/*
 * caisson's eBPF syscall witness, the kernel side (CO-RE, libbpf >= 1.0; tracepoints and
 * BTF only, no kprobes). It does what collectors/ebpf.bt does for bpftrace, and its loader
 * (loader.c) prints the same lines, so collectors/ebpf.py parses either. Beyond bpftrace, it
 * reads path arguments whole (up to PATH_MAX) and gives the paths the kernel holds (K_PATH:
 * each relative name's directory, each opened file, each exec's cwd), so what is recorded is
 * what the kernel opened, whatever dirfd, dup, symlink or magic link led there.
 *
 * Scope (set by the loader before load, read-only here):
 *   ns_inum: inode number of the chamber's PID namespace;
 *   ns_level: that namespace's level (1 for a container of the host);
 *   init_tgid: host pid of its init (the kernel reuses a freed namespace's inode number).
 * A task is in the chamber when its PID namespace at level ns_level is that namespace,
 * so a process that unshares a nested PID namespace is still witnessed.
 *
 * Records go to one BPF ring buffer, in reserve order. A submit wakes the loader only
 * when wake_bytes are pending (BPF_RB_NO_WAKEUP otherwise; the loader also polls on a
 * short timeout): a wake-up per record costs the traced program an interrupt inside its
 * syscall. A record that finds the ring full (or a call whose entry finds its map full)
 * is counted in `lost`, which the loader prints as "Lost N events".
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "witness.h"

char LICENSE[] SEC("license") = "GPL";

const volatile u32 ns_inum = 0;
const volatile u32 ns_level = 1;
const volatile s32 init_tgid = 0;
const volatile u64 wake_bytes = 1 << 20;

#define AT_FDCWD -100

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);  /* the loader may resize it before load */
} rb SEC(".maps");

/* An open or change between its entry and its return (bpftrace's @t, @o, @p1, @p2). */
struct entry {
	u64 ts;
	u64 p1, p2;  /* user addresses of its names (p2: 0 for one-name calls); audited: args 2, 3 */
	s32 i0, i1;
	u32 sys;     /* audited calls and sends: SYS_* (0 for the others) */
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);  /* tid */
	__type(value, struct entry);
} entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);  /* io_uring request address */
	__type(value, u8);
} urings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lost SEC(".maps");

static __always_inline void count_lost(void)
{
	u32 zero = 0;
	u64 *n = bpf_map_lookup_elem(&lost, &zero);

	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline struct rec *reserve(u8 kind)
{
	struct rec *r = bpf_ringbuf_reserve(&rb, sizeof(*r), 0);

	if (!r) {
		count_lost();
		return NULL;
	}
	r->kind = kind;
	r->sys = r->flags = r->pad = 0;
	r->i0 = r->i1 = r->nspid = 0;
	r->ret = 0;
	r->req = r->a3 = 0;
	r->s[0] = 0;
	return r;
}

static __always_inline void submit(struct rec *r)
{
	u64 pending = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);

	bpf_ringbuf_submit(r, pending >= wake_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* --- long records: built in a per-CPU scratch and written with the length of their string
 * (bpf_ringbuf_output copies them), so a path of 4 KiB costs its bytes and a short one
 * little. Tracepoint programs do not nest on a CPU (trace_call_bpf's bpf_prog_active), so
 * one scratch per CPU serves every program. --- */

#define WALK_BUF (WALK_END + 256 + 8)  /* a name is at most 255 bytes (NAME_MAX) past a masked offset */

/* A dentry's d_hash, d_parent and d_name, which are adjacent (include/linux/dcache.h, 6.1
 * to 6.18): one read per component. */
struct dentry_head {
	u64 hash_next, hash_pprev;
	u64 parent;
	u32 hash, len;
	u64 name;
};

struct scratch {
	struct lrec name;  /* the O, S or U record being built */
	struct lrec path;  /* a Y record */
	char walk[WALK_BUF];  /* a walked path, built backwards to walk[WALK_END] */
	struct dentry_head head;  /* of the file a walk starts at */
	struct path dir;   /* the directory of the last Y i0/i1/cwd line */
	struct path file;  /* the file an open returned */
	struct path root;  /* the chamber's root, being read */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct scratch);
} scratches SEC(".maps");

static __always_inline struct scratch *scratch(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&scratches, &zero);
}

static __always_inline void head(struct rec *r, u8 kind)
{
	r->kind = kind;
	r->sys = r->flags = r->pad = 0;
	r->tgid = r->tid = r->nspid = 0;
	r->i0 = r->i1 = 0;
	r->ret = 0;
	r->ts = r->req = r->a3 = 0;
}

/* Write a long record whose string is `n` bytes, its NUL included (1 <= n <= PATHLEN). */
static __always_inline void output(struct lrec *l, u32 n)
{
	u64 pending = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);
	u64 size = offsetof(struct rec, s) + (n <= PATHLEN ? n : PATHLEN);

	if (bpf_ringbuf_output(&rb, l, size, pending >= wake_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		count_lost();
}

/* Read a path argument from user memory into `l`'s string; its length with the NUL (an
 * unreadable one is empty: 1). */
static __always_inline u32 user_path(struct lrec *l, const char *p)
{
	long n = bpf_probe_read_user_str(l->r.s, PATHLEN, p);

	if (n <= 0) {
		l->r.s[0] = 0;
		return 1;
	}
	return n;
}

/* The pid of `p`'s process in the chamber's namespace (upid at ns_level). */
static __always_inline struct upid upid_at(struct pid *p)
{
	struct upid up = {};

	bpf_core_read(&up, sizeof(up), &p->numbers[ns_level & 31]);
	return up;
}

static __always_inline bool in_chamber(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pid *p = t->thread_pid;

	if (!p || p->level < ns_level)
		return false;
	struct upid up = upid_at(p);
	if (BPF_CORE_READ(up.ns, ns.inum) != ns_inum)
		return false;
	return BPF_CORE_READ(up.ns, child_reaper, tgid) == init_tgid;
}

static __always_inline s32 nspid_of_current(void)
{
	struct task_struct *t = bpf_get_current_task_btf();

	return upid_at(t->group_leader->thread_pid).nr;
}

static __always_inline void ids(struct rec *r)
{
	u64 pt = bpf_get_current_pid_tgid();

	r->tgid = pt >> 32;
	r->tid = (u32)pt;
	r->nspid = nspid_of_current();
}

/* --- paths the kernel holds: an fd's file, or the cwd, walked up its dentries and mounts
 * to the chamber's root (its init's) as d_path() does (fs/d_path.c, prepend_path): a Y line
 * says what the kernel opened, whatever name, dirfd, dup, symlink, magic link or `..` led
 * there. Names are read without the kernel's rename_lock: a rename racing the walk can
 * give a name it never had together with the others. --- */

struct walk {
	u64 dentry, mnt;            /* where the walk is: a struct dentry *, its struct vfsmount * */
	u64 top;                    /* that mount's root dentry */
	u64 root_dentry, root_mnt;  /* the chamber's root */
	u32 pos;                    /* the path so far: walk[pos..WALK_END) */
	u8 state;                   /* P_* once the walk ended; WALKING until then */
};
#define WALKING 0xff


/* Read a dentry's head: by one read where its fields are adjacent, else field by field. */
static __always_inline void dentry_head(u64 dentry, struct dentry_head *h)
{
	struct dentry *d = (struct dentry *)dentry;

	if (bpf_core_field_offset(struct dentry, d_parent) == bpf_core_field_offset(struct dentry, d_hash) + 16 &&
	    bpf_core_field_offset(struct dentry, d_name) == bpf_core_field_offset(struct dentry, d_hash) + 24) {
		bpf_probe_read_kernel(h, sizeof(*h), (void *)dentry + bpf_core_field_offset(struct dentry, d_hash));
	} else {  /* a kernel that parted them */
		h->hash_pprev = (u64)BPF_CORE_READ(d, d_hash.pprev);
		h->parent = (u64)BPF_CORE_READ(d, d_parent);
		h->len = BPF_CORE_READ(d, d_name.len);
		h->name = (u64)BPF_CORE_READ(d, d_name.name);
	}
}

/* The chamber's root (its init's), read once: the same for every task of the run. Two
 * scalars: clang 14 gives a static array in .bss a BTF size the kernel refuses. */
static u64 root_dentry, root_mnt;

static long walk_step(u64 i, struct walk *w)
{
	struct scratch *sc = scratch();
	struct dentry_head h = {};

	if (!sc) {
		w->state = P_NONE;
		return 1;
	}
	if (w->dentry == w->root_dentry && w->mnt == w->root_mnt) {
		w->state = P_OK;
		return 1;
	}
	dentry_head(w->dentry, &h);
	if (w->dentry == w->top || w->dentry == h.parent) {  /* the top of its mount: on to where it is mounted */
		struct mount *m = (struct mount *)(w->mnt - bpf_core_field_offset(struct mount, mnt));
		struct mount *up = BPF_CORE_READ(m, mnt_parent);

		/* a dentry of no tree (pipefs, sockfs, anonymous inodes), or the top of a mount
		 * tree that does not hold the chamber's root */
		if (w->dentry != w->top || up == m) {
			w->state = P_NONE;
			return 1;
		}
		struct vfsmount *vm = (struct vfsmount *)((u64)up + bpf_core_field_offset(struct mount, mnt));

		w->dentry = (u64)BPF_CORE_READ(m, mnt_mountpoint);
		w->mnt = (u64)vm;
		w->top = (u64)BPF_CORE_READ(vm, mnt_root);
		return 0;
	}
	if (h.len == 0 || h.len > 255 || h.len + 1 > w->pos) {  /* longer than WALK_END bytes (or a torn name) */
		w->state = P_CUT;
		return 1;
	}
	w->pos -= h.len + 1;
	u32 at = w->pos & (WALK_END - 1);

	sc->walk[at] = '/';
	bpf_probe_read_kernel(&sc->walk[(at + 1) & (WALK_END - 1)], h.len & 255, (void *)h.name);
	w->dentry = h.parent;
	return 0;
}

/* Walk (dentry, mnt) into sc->walk: the path is walk[*pos..WALK_END); its state (P_*). */
static __always_inline u8 walk_path(struct scratch *sc, u64 dentry, u64 mnt, u32 *pos)
{
	struct walk w = { .dentry = dentry, .mnt = mnt, .pos = WALK_END, .state = WALKING };
	struct vfsmount *vm = (struct vfsmount *)mnt;
	struct dentry_head *h = &sc->head;

	if (!root_dentry) {
		struct task_struct *t = bpf_get_current_task_btf();
		struct fs_struct *fs = BPF_CORE_READ(upid_at(t->thread_pid).ns, child_reaper, fs);

		if (!fs)  /* the chamber's init is exiting: the task's own root */
			fs = BPF_CORE_READ(t, fs);
		BPF_CORE_READ_INTO(&sc->root, fs, root);
		root_mnt = (u64)sc->root.mnt;
		root_dentry = (u64)sc->root.dentry;
	}
	w.root_dentry = root_dentry;
	w.root_mnt = root_mnt;
	w.top = (u64)BPF_CORE_READ(vm, mnt_root);
	sc->walk[WALK_END] = 0;
	dentry_head(dentry, h);
	if (h->parent != dentry && !h->hash_pprev) {
		__builtin_memcpy(&sc->walk[WALK_END - 10], " (deleted)", 10);  /* unlinked, as d_path says */
		w.pos -= 10;
	}
	bpf_loop(WALK_END / 2 + 64, walk_step, &w, 0);
	if (w.state == P_OK && w.pos == WALK_END) {  /* the root itself */
		w.pos = WALK_END - 1;
		sc->walk[WALK_END - 1] = '/';
	}
	*pos = w.pos;
	return w.state == WALKING ? P_CUT : w.state;
}

/* A Y line of a walk's result (a P_OK one's path is walk[pos..WALK_END)); the bytes of
 * its path, which stays in sc->path until the next Y line. */
static __always_inline u32 path_line(struct scratch *sc, u32 tid, u8 field, u8 state, u32 pos)
{
	struct lrec *l = &sc->path;
	u32 n = 1;

	if (state == P_OK) {
		pos &= WALK_END - 1;
		n = WALK_END + 1 - pos;
		bpf_probe_read_kernel(l->r.s, n, &sc->walk[pos]);
	} else {
		l->r.s[0] = 0;
	}
	head(&l->r, K_PATH);
	l->r.tid = tid;
	l->r.i0 = field;
	l->r.i1 = state;
	output(l, n);
	return n - 1;
}

/* The path of the file open at the current task's `fd` (AT_FDCWD: its cwd); false when none. */
static __always_inline bool fd_path(s32 fd, struct path *p)
{
	struct task_struct *t = bpf_get_current_task_btf();

	if (fd == AT_FDCWD) {
		BPF_CORE_READ_INTO(p, t, fs, pwd);
		return p->dentry && p->mnt;
	}
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	struct file **files;
	struct file *f = NULL;

	if (fd < 0 || !fdt || (u32)fd >= BPF_CORE_READ(fdt, max_fds))
		return false;
	files = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &files[fd]);
	if (!f)
		return false;
	BPF_CORE_READ_INTO(p, f, f_path);
	return p->dentry && p->mnt;
}

/* Walk the file open at `fd` (AT_FDCWD: the cwd) into sc->walk; its state (P_BADF: none). */
static __always_inline u8 walk_fd(struct scratch *sc, s32 fd, u32 *pos, struct path *p)
{
	*pos = WALK_END;
	return fd_path(fd, p) ? walk_path(sc, (u64)p->dentry, (u64)p->mnt, pos) : P_BADF;
}

/* A Y line for the file open at `fd` (AT_FDCWD: the cwd), whose path it leaves in sc->dir;
 * the bytes of its path (0: none). */
static __always_inline u32 fd_line(u32 tid, u8 field, s32 fd)
{
	struct scratch *sc = scratch();
	u32 pos;

	if (!sc)
		return 0;
	u8 state = walk_fd(sc, fd, &pos, &sc->dir);
	u32 n = path_line(sc, tid, field, state, pos);

	return state == P_OK ? n : 0;
}

/* Whether `len` bytes of the walk at `at` are those of sc->path (`path`) or sc->name at `off`. */
struct same_ctx {
	u32 at, off, len;
	bool path;
	bool same;
};

static long same_chunk(u64 i, struct same_ctx *c)
{
	struct scratch *sc = scratch();
	u32 k = i * 8;
	u64 a = 0, b = 0;

	if (!sc || k >= c->len)
		return 1;
	a = *(u64 *)&sc->walk[(c->at + k) & (WALK_END - 1)];
	b = *(u64 *)&(c->path ? sc->path.r.s : sc->name.r.s)[(c->off + k) & (WALK_END - 1)];
	u32 left = c->len - k;
	u64 mask = left >= 8 ? ~0ULL : (1ULL << (left * 8)) - 1;  /* little-endian: the first bytes are the low ones */
	if ((a ^ b) & mask) {
		c->same = false;
		return 1;
	}
	return 0;
}

static __always_inline bool same_bytes(u32 at, bool path, u32 off, u32 len)
{
	struct same_ctx c = { .at = at, .off = off, .len = len, .path = path, .same = true };

	bpf_loop(WALK_END / 8 + 1, same_chunk, &c, 0);
	return c.same;
}

/* Whether the file at `p` is the entry `name_len` bytes of sc->name name in the directory
 * at `dir` (and still linked): then its path is that directory's and the name. */
static __always_inline bool entry_of(struct scratch *sc, const struct path *p, const struct path *dir, u32 name_len)
{
	struct dentry_head *h = &sc->head;

	if (p->mnt != dir->mnt || name_len == 0 || name_len > 255)
		return false;
	dentry_head((u64)p->dentry, h);
	if (h->parent != (u64)dir->dentry || h->parent == (u64)p->dentry || !h->hash_pprev || h->len != name_len)
		return false;
	bpf_probe_read_kernel(sc->walk, name_len & 255, (void *)h->name);
	return same_bytes(0, false, 0, name_len);
}

/* A Y ret line for the file an open returned: none when its path is the name the call gave
 * (`name_len` bytes in sc->name), or that name joined to its directory's (`base_len` bytes in
 * sc->path, the Y line just printed, of the directory at sc->dir; 0: the name is absolute), so
 * most opens cost no line; a name of one component in its directory costs no walk either. */
static __always_inline void file_line(u32 tid, s32 fd, u32 name_len, bool relative_name, u32 base_len)
{
	struct scratch *sc = scratch();
	u32 pos;

	if (!sc)
		return;
	if (relative_name && base_len && fd_path(fd, &sc->file) && entry_of(sc, &sc->file, &sc->dir, name_len))
		return;
	u8 state = walk_fd(sc, fd, &pos, &sc->file);

	if (state == P_OK) {
		pos &= WALK_END - 1;
		u32 len = WALK_END - pos;

		if (!relative_name && len == name_len && same_bytes(pos, false, 0, name_len))
			return;
		if (relative_name && base_len && len == base_len + 1 + name_len && sc->walk[(pos + base_len) & (WALK_END - 1)] == '/'
		    && same_bytes(pos, true, 0, base_len) && same_bytes(pos + base_len + 1, false, 0, name_len))
			return;
	}
	path_line(sc, tid, Y_RET, state, pos);
}

/* A name is resolved against a directory (its dirfd's, or the cwd) when it is relative. */
static __always_inline bool relative(const struct lrec *l)
{
	return l->r.s[0] != '/' && l->r.s[0] != 0;
}

#define NO_FD (-1)
#define S_AT(s, i) ((s)[(i) & (WALK_END - 1)])

/* Whether `s` holds the `len` bytes of `lit` at `at`. */
static __always_inline bool has_at(const char *s, u32 at, const char *lit, u32 len)
{
#pragma unroll
	for (u32 i = 0; i < 16; i++)
		if (i < len && S_AT(s, at + i) != lit[i])
			return false;
	return true;
}

/* The decimal number at `s[*at]` as procfs reads one (no sign, no leading zero, at most 9
 * digits), `*at` moved past it; -1 when there is none. */
static __always_inline s32 number_at(const char *s, u32 *at)
{
	s32 v = 0;
	u32 k = 0;

#pragma unroll
	for (u32 i = 0; i < 10; i++) {
		char c = S_AT(s, *at + i);
		if (k < i || c < '0' || c > '9')
			continue;
		v = v * 10 + (c - '0');
		k = i + 1;
	}
	if (k == 0 || k > 9 || (k > 1 && S_AT(s, *at) == '0'))
		return -1;
	*at += k;
	return v;
}

/* The fd whose file a name through a magic link to a directory of the caller's own process
 * leads into (proc(5); collectors._strace_parser.MAGIC_LINK's forms less root/):
 * /proc/<self|thread-self|its pid>[/task/<its tid>]/fd/N/... and /dev/fd/N/...; AT_FDCWD for
 * the same with cwd/; NO_FD for any other name (another process's or thread's, root/). */
__noinline int magic_fd_of_name(void);

/* Verified once (a global function), not in each of the programs that return a change. */
__noinline int magic_fd_of_name(void)
{
	struct scratch *sc = scratch();
	const char *s;
	u32 at = 0;
	s32 fd;

	if (!sc)
		return NO_FD;
	s = sc->name.r.s;

	if (has_at(s, 0, "/dev/fd/", 8)) {
		at = 8;
	} else if (has_at(s, 0, "/proc/", 6)) {
		if (has_at(s, 6, "self/", 5)) {
			at = 11;
		} else if (has_at(s, 6, "thread-self/", 12)) {
			at = 18;
		} else {
			at = 6;
			if (number_at(s, &at) != nspid_of_current() || S_AT(s, at) != '/')
				return NO_FD;
			at += 1;
		}
		if (has_at(s, at, "task/", 5)) {  /* the caller's own thread only */
			at += 5;
			struct task_struct *t = bpf_get_current_task_btf();
			if (number_at(s, &at) != upid_at(t->thread_pid).nr || S_AT(s, at) != '/')
				return NO_FD;
			at += 1;
		}
		if (has_at(s, at, "cwd/", 4))
			return AT_FDCWD;
		if (!has_at(s, at, "fd/", 3))
			return NO_FD;
		at += 3;
	} else {
		return NO_FD;
	}
	fd = number_at(s, &at);
	return fd >= 0 && S_AT(s, at) == '/' ? fd : NO_FD;
}

/* For a name that is not relative: a Y line of `field` for the directory a magic link in it
 * leads into (none when it has no such link). */
static __always_inline void magic_line(struct scratch *sc, u32 tid, u8 field)
{
	s32 fd = magic_fd_of_name();

	if (fd != NO_FD)
		fd_line(tid, field, fd);
}

/* --- exec: its path, argv and environment at entry (gone after a successful exec) --- */

struct strings_ctx {
	const char *const *list;  /* user argv or envp */
	u32 tid;
	u8 kind;
	u32 n;                     /* strings seen */
};

/* The `i`th string of the user list at `list`, up to PATHLEN - 1 bytes (as strace -s 4096
 * keeps them), written as a long record from the scratch's Y record (free once the exec's
 * cwd line is out): 1 when the list has no `i`th string. A global function: verified once,
 * not at each call site of each exec program. */
__noinline int string_record(u64 list, u64 i, u32 tid, u32 kind);

__noinline int string_record(u64 list, u64 i, u32 tid, u32 kind)
{
	struct scratch *sc = scratch();
	const char *s = NULL;
	long n;

	if (bpf_probe_read_user(&s, sizeof(s), (const void *)(list + i * sizeof(s))) || !s)
		return 1;
	if (!sc) {
		count_lost();
		return 0;
	}
	head(&sc->path.r, kind);
	sc->path.r.tid = tid;
	n = bpf_probe_read_user_str(sc->path.r.s, PATHLEN, s);
	if (n <= 0) {
		sc->path.r.s[0] = 0;
		n = 1;
	}
	output(&sc->path, n);
	return 0;
}

static long one_string(u64 i, struct strings_ctx *c)
{
	if (string_record((u64)c->list, i, c->tid, c->kind))
		return 1;
	c->n = i + 1;
	return 0;
}

/* Print a list's strings; true when it holds more than `max`. */
static __always_inline bool strings(const char *const *list, u32 tid, u8 kind, u32 max)
{
	struct strings_ctx c = { .list = list, .tid = tid, .kind = kind, .n = 0 };
	const char *more = NULL;

	if (!list)
		return false;
	bpf_loop(max, one_string, &c, 0);
	return c.n == max && !bpf_probe_read_user(&more, sizeof(more), &list[max]) && more;
}

static __always_inline int on_exec(u8 sys, const char *path, const char *const *argv, const char *const *envp)
{
	if (!in_chamber())
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();
	struct task_struct *parent = t->real_parent;
	struct rec *r = reserve(K_EXEC);
	u32 tid;

	if (!r)
		return 0;
	ids(r);
	tid = r->tid;
	r->ts = bpf_ktime_get_ns();
	r->sys = sys;
	/* the parent's pid in the chamber; 0 when it is outside (the engine's shim) */
	r->i0 = BPF_CORE_READ(parent, thread_pid, level) >= ns_level ?
		upid_at(BPF_CORE_READ(parent, group_leader, thread_pid)).nr : 0;
	r->i1 = BPF_CORE_READ(parent, tgid);
	submit(r);
	struct scratch *sc = scratch();
	if (sc) {  /* its path (S) and cwd (Y) */
		u32 n = user_path(&sc->name, path);

		head(&sc->name.r, K_FIRST);
		sc->name.r.tid = tid;
		output(&sc->name, n);
		fd_line(tid, Y_CWD, AT_FDCWD);
	}
	u8 cut = strings(argv, tid, K_ARG, ARGV_MAX) ? CUT_ARGV : 0;
	cut |= strings(envp, tid, K_ENV, ENV_MAX) ? CUT_ENV : 0;
	r = reserve(K_SEAL);
	if (!r)
		return 0;
	r->tid = tid;
	r->flags = cut;
	submit(r);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_execve")
int enter_execve(struct trace_event_raw_sys_enter *ctx)
{
	return on_exec(SYS_EXECVE, (const char *)ctx->args[0], (const char *const *)ctx->args[1],
		       (const char *const *)ctx->args[2]);
}

SEC("tracepoint/syscalls/sys_enter_execveat")
int enter_execveat(struct trace_event_raw_sys_enter *ctx)
{
	return on_exec(SYS_EXECVEAT, (const char *)ctx->args[1], (const char *const *)ctx->args[2],
		       (const char *const *)ctx->args[3]);
}

/* --- opens and changes: entry keeps the time, two integers and the name pointers; the
 * names are read on return, when the kernel has faulted them in (a fresh binary's
 * .rodata may not be at entry). --- */

static __always_inline int on_enter(u64 p1, u64 p2, s32 i0, s32 i1)
{
	if (!in_chamber())
		return 0;
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry e = { .ts = bpf_ktime_get_ns(), .p1 = p1, .p2 = p2, .i0 = i0, .i1 = i1 };

	if (bpf_map_update_elem(&entries, &tid, &e, BPF_ANY))
		count_lost();  /* the map is full: this call will not be printed */
	return 0;
}

static __always_inline void ret_line(u8 sys, s64 ret)
{
	struct rec *r = reserve(K_RET);

	if (!r)
		return;
	ids(r);
	r->ts = bpf_ktime_get_ns();
	r->sys = sys;
	r->ret = ret;
	submit(r);
}

/* The lines of an open or change that returned, in this order: S (a rename's or link's
 * first name), Y i0 / Y i1 (the directory each relative name is resolved against), Y ret
 * (the file an open returned, unless its path is the name as placed), O. */
static __always_inline int on_return(u8 sys, s64 ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry *e = bpf_map_lookup_elem(&entries, &tid);
	struct scratch *sc = scratch();
	u32 n;

	if (!e) {  /* entered before the probes were attached, or outside the chamber */
		if (in_chamber())
			ret_line(sys, ret);
		return 0;
	}
	if (!sc) {
		count_lost();
		bpf_map_delete_elem(&entries, &tid);
		return 0;
	}
	if (e->p2) {  /* rename, link, symlink: the first name on its own line */
		n = user_path(&sc->name, (const char *)e->p1);
		head(&sc->name.r, K_FIRST);
		sc->name.r.tid = tid;
		output(&sc->name, n);
		if (sys != SYS_SYMLINK && sys != SYS_SYMLINKAT) {  /* a symlink's is its text */
			if (relative(&sc->name))
				fd_line(tid, Y_I0, e->i0);
			else
				magic_line(sc, tid, Y_I0);
		}
	}
	n = user_path(&sc->name, (const char *)(e->p2 ? e->p2 : e->p1));
	bool rel = relative(&sc->name);
	u32 base = rel ? fd_line(tid, e->p2 ? Y_I1 : Y_I0, e->p2 ? e->i1 : e->i0) : 0;

	if (!rel)
		magic_line(sc, tid, e->p2 ? Y_I1 : Y_I0);

	if (ret >= 0 && (sys == SYS_OPENAT || sys == SYS_OPENAT2 || sys == SYS_OPEN || sys == SYS_CREAT))
		file_line(tid, ret, n - 1, rel, base);
	head(&sc->name.r, K_DONE);
	ids(&sc->name.r);
	sc->name.r.ts = e->ts;
	sc->name.r.sys = sys;
	sc->name.r.i0 = e->i0;
	sc->name.r.i1 = e->i1;
	sc->name.r.ret = ret;
	output(&sc->name, n);
	bpf_map_delete_elem(&entries, &tid);
	return 0;
}

#define ARG(i) (ctx->args[i])
#define ENTER(name, p1, p2, i0, i1) \
	SEC("tracepoint/syscalls/sys_enter_" #name) \
	int enter_##name(struct trace_event_raw_sys_enter *ctx) { return on_enter(p1, p2, i0, i1); }
#define EXIT(name, sys) \
	SEC("tracepoint/syscalls/sys_exit_" #name) \
	int exit_##name(struct trace_event_raw_sys_exit *ctx) { return on_return(sys, ctx->ret); }

ENTER(openat, ARG(1), 0, (s32)ARG(0), (s32)ARG(2))
ENTER(open, ARG(0), 0, AT_FDCWD, (s32)ARG(1))
ENTER(creat, ARG(0), 0, AT_FDCWD, 0101 | 01000)  /* creat(2) is open(2) with O_CREAT|O_WRONLY|O_TRUNC */
ENTER(unlink, ARG(0), 0, AT_FDCWD, 0)
ENTER(rmdir, ARG(0), 0, AT_FDCWD, 0)
ENTER(mkdir, ARG(0), 0, AT_FDCWD, 0)
ENTER(chdir, ARG(0), 0, AT_FDCWD, 0)
ENTER(unlinkat, ARG(1), 0, (s32)ARG(0), (s32)ARG(2))
ENTER(mkdirat, ARG(1), 0, (s32)ARG(0), 0)
ENTER(rename, ARG(0), ARG(1), AT_FDCWD, AT_FDCWD)
ENTER(renameat, ARG(1), ARG(3), (s32)ARG(0), (s32)ARG(2))
ENTER(renameat2, ARG(1), ARG(3), (s32)ARG(0), (s32)ARG(2))
ENTER(symlink, ARG(0), ARG(1), AT_FDCWD, AT_FDCWD)
ENTER(link, ARG(0), ARG(1), AT_FDCWD, AT_FDCWD)
ENTER(symlinkat, ARG(0), ARG(2), AT_FDCWD, (s32)ARG(1))
ENTER(linkat, ARG(1), ARG(3), (s32)ARG(0), (s32)ARG(2))
ENTER(chmod, ARG(0), 0, AT_FDCWD, 0)
ENTER(fchmodat, ARG(1), 0, (s32)ARG(0), 0)
ENTER(truncate, ARG(0), 0, AT_FDCWD, 0)
ENTER(mknod, ARG(0), 0, AT_FDCWD, 0)
ENTER(mknodat, ARG(1), 0, (s32)ARG(0), 0)

/* openat2's flags are in its user struct open_how (a u64; cut to 32 bits as bpftrace's) */
SEC("tracepoint/syscalls/sys_enter_openat2")
int enter_openat2(struct trace_event_raw_sys_enter *ctx)
{
	u64 flags = 0;

	if (!in_chamber())
		return 0;
	bpf_probe_read_user(&flags, sizeof(flags), (void *)ARG(2));
	return on_enter(ARG(1), 0, (s32)ARG(0), (s32)flags);
}

EXIT(openat, SYS_OPENAT)
EXIT(openat2, SYS_OPENAT2)
EXIT(open, SYS_OPEN)
EXIT(creat, SYS_CREAT)
EXIT(unlink, SYS_UNLINK)
EXIT(rmdir, SYS_RMDIR)
EXIT(mkdir, SYS_MKDIR)
EXIT(chdir, SYS_CHDIR)
EXIT(unlinkat, SYS_UNLINKAT)
EXIT(mkdirat, SYS_MKDIRAT)
EXIT(rename, SYS_RENAME)
EXIT(renameat, SYS_RENAMEAT)
EXIT(renameat2, SYS_RENAMEAT2)
EXIT(symlink, SYS_SYMLINK)
EXIT(link, SYS_LINK)
EXIT(symlinkat, SYS_SYMLINKAT)
EXIT(linkat, SYS_LINKAT)
EXIT(chmod, SYS_CHMOD)
EXIT(fchmodat, SYS_FCHMODAT)
EXIT(truncate, SYS_TRUNCATE)
EXIT(mknod, SYS_MKNOD)
EXIT(mknodat, SYS_MKNODAT)

/* --- fchdir, connect: entry lines; their return is an R line --- */

SEC("tracepoint/syscalls/sys_enter_fchdir")
int enter_fchdir(struct trace_event_raw_sys_enter *ctx)
{
	if (!in_chamber())
		return 0;
	struct rec *r = reserve(K_FCHDIR);

	if (!r)
		return 0;
	ids(r);
	r->ts = bpf_ktime_get_ns();
	r->sys = SYS_FCHDIR;
	r->i0 = (s32)ARG(0);
	submit(r);
	return 0;
}

/* A socket address from user memory into a record: i0 the family, s the address (4 or 16
 * bytes of AF_INET/AF_INET6, the path of AF_UNIX, an abstract name as @name), i1 the port
 * in host order. Other families: the family only. */
static __always_inline void read_sockaddr(struct rec *r, const u8 *sa)
{
	u16 family = 0, port = 0;

	bpf_probe_read_user(&family, sizeof(family), sa);
	r->i0 = family;
	if (family == 2) {  /* AF_INET: sin_port, sin_addr */
		bpf_probe_read_user(&port, sizeof(port), sa + 2);
		bpf_probe_read_user(r->s, 4, sa + 4);
	} else if (family == 10) {  /* AF_INET6: sin6_port, sin6_addr */
		bpf_probe_read_user(&port, sizeof(port), sa + 2);
		bpf_probe_read_user(r->s, 16, sa + 8);
	} else if (family == 1) {  /* AF_UNIX: the path; an abstract name (leading NUL) as @name */
		u8 first = 0;

		bpf_probe_read_user(&first, 1, sa + 2);
		if (first == 0) {
			r->s[0] = '@';
			if (bpf_probe_read_user_str(r->s + 1, STRLEN - 1, sa + 3) < 0)
				r->s[1] = 0;
		} else if (bpf_probe_read_user_str(r->s, STRLEN, sa + 2) < 0) {
			r->s[0] = 0;
		}
	}
	r->i1 = __builtin_bswap16(port);
}

SEC("tracepoint/syscalls/sys_enter_connect")
int enter_connect(struct trace_event_raw_sys_enter *ctx)
{
	if (!in_chamber())
		return 0;
	const u8 *sa = (const u8 *)ARG(1);
	struct rec *r = reserve(K_CONNECT);

	if (!r)
		return 0;
	ids(r);
	r->ts = bpf_ktime_get_ns();
	r->sys = SYS_CONNECT;
	read_sockaddr(r, sa);
	submit(r);
	return 0;
}

static __always_inline int on_ret_line(u8 sys, s64 ret)
{
	if (in_chamber())
		ret_line(sys, ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_execve")
int exit_execve(struct trace_event_raw_sys_exit *ctx) { return on_ret_line(SYS_EXECVE, ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_execveat")
int exit_execveat(struct trace_event_raw_sys_exit *ctx) { return on_ret_line(SYS_EXECVEAT, ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_fchdir")
int exit_fchdir(struct trace_event_raw_sys_exit *ctx) { return on_ret_line(SYS_FCHDIR, ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_connect")
int exit_connect(struct trace_event_raw_sys_exit *ctx) { return on_ret_line(SYS_CONNECT, ctx->ret); }

/* --- sends naming a destination (sendto, sendmsg, sendmmsg): an E line and one N line
 * per destination at entry, read from user memory then; the R line at exit. A send with no
 * destination (a connected socket: most of them, the model's traffic among them) costs a
 * pointer test and, for sendmsg/sendmmsg, a read of msg_name; nothing is recorded. --- */

static __always_inline void dest(u32 tid, const u8 *sa, u8 kind)
{
	struct rec *r = reserve(kind);

	if (!r)
		return;
	r->tid = tid;
	read_sockaddr(r, sa);
	submit(r);
}

/* The E line of a send with a destination, and the entry its exit's R line needs. */
static __always_inline u32 send_enter(u8 sys, s32 flags)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry e = { .ts = bpf_ktime_get_ns(), .sys = sys };
	struct rec *r = reserve(K_SEND);

	if (bpf_map_update_elem(&entries, &tid, &e, BPF_ANY))
		count_lost();
	if (!r)
		return tid;
	ids(r);
	r->ts = e.ts;
	r->sys = sys;
	r->i0 = flags;
	submit(r);
	return tid;
}

static __always_inline void seal(u32 tid, u8 cut)
{
	struct rec *r;

	if (cut) {
		r = reserve(K_CUT_DESTS);
		if (r) {
			r->tid = tid;
			submit(r);
		}
	}
	r = reserve(K_SEAL);
	if (!r)
		return;
	r->tid = tid;
	submit(r);
}

SEC("tracepoint/syscalls/sys_enter_sendto")
int enter_sendto(struct trace_event_raw_sys_enter *ctx)
{
	if (!ARG(4) || !in_chamber())
		return 0;
	u32 tid = send_enter(SYS_SENDTO, (s32)ARG(3));

	dest(tid, (const u8 *)ARG(4), K_DEST);
	seal(tid, 0);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_sendmsg")
int enter_sendmsg(struct trace_event_raw_sys_enter *ctx)
{
	u64 name = 0;

	if (!in_chamber())
		return 0;
	bpf_probe_read_user(&name, sizeof(name), (void *)ARG(1));  /* struct msghdr: msg_name first */
	if (!name)
		return 0;
	u32 tid = send_enter(SYS_SENDMSG, (s32)ARG(2));

	dest(tid, (const u8 *)name, K_DEST);
	seal(tid, 0);
	return 0;
}

struct mmsg_ctx {
	const u8 *vec;  /* user struct mmsghdr[]: a msghdr (56 bytes) and msg_len, 64 bytes each */
	u32 tid;
	u32 seen;       /* messages naming a destination */
	bool started;
	s32 flags;
};

static long one_mmsg(u64 i, struct mmsg_ctx *c)
{
	u64 name = 0;

	bpf_probe_read_user(&name, sizeof(name), c->vec + i * 64);
	if (!name)
		return 0;
	if (!c->started) {
		c->tid = send_enter(SYS_SENDMMSG, c->flags);
		c->started = true;
	}
	dest(c->tid, (const u8 *)name, K_DEST);
	c->seen++;
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_sendmmsg")
int enter_sendmmsg(struct trace_event_raw_sys_enter *ctx)
{
	if (!in_chamber())
		return 0;
	u32 vlen = (u32)ARG(2);
	struct mmsg_ctx c = { .vec = (const u8 *)ARG(1), .flags = (s32)ARG(3) };

	bpf_loop(vlen < MMSG_MAX ? vlen : MMSG_MAX, one_mmsg, &c, 0);
	if (!c.started && vlen > MMSG_MAX) {  /* none named in the first MMSG_MAX: say the rest is unread */
		c.tid = send_enter(SYS_SENDMMSG, c.flags);
		c.started = true;
	}
	if (c.started)
		seal(c.tid, vlen > MMSG_MAX);
	return 0;
}

static __always_inline int send_exit(u8 sys, s64 ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry *e = bpf_map_lookup_elem(&entries, &tid);

	if (!e || e->sys != sys)
		return 0;
	bpf_map_delete_elem(&entries, &tid);
	ret_line(sys, ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_sendto")
int exit_sendto(struct trace_event_raw_sys_exit *ctx) { return send_exit(SYS_SENDTO, ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_sendmsg")
int exit_sendmsg(struct trace_event_raw_sys_exit *ctx) { return send_exit(SYS_SENDMSG, ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_sendmmsg")
int exit_sendmmsg(struct trace_event_raw_sys_exit *ctx) { return send_exit(SYS_SENDMMSG, ctx->ret); }

/* --- audited calls (collectors._strace_parser.AUDITED_SYSCALLS): one P line at exit. The
 * chamber's seccomp filter refuses the denied ones before sys_enter fires (kernel/entry:
 * seccomp runs before trace_sys_enter), but their sys_exit tracepoint still fires, with
 * -EPERM: an exit with no entry is a refused call. Entry keeps four integer arguments
 * (process_vm_*: pid, liovcnt, riovcnt, flags: never the buffers; memfd_create: flags, and
 * its name pointer, read at exit). --- */

static __always_inline int audit_enter(u8 sys, s64 a0, s64 a1, u64 a2, u64 a3)
{
	if (!in_chamber())
		return 0;
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry e = { .ts = bpf_ktime_get_ns(), .p1 = a2, .p2 = a3, .i0 = (s32)a0, .i1 = (s32)a1, .sys = sys };

	if (bpf_map_update_elem(&entries, &tid, &e, BPF_ANY))
		count_lost();
	return 0;
}

static __always_inline int audit_exit(u8 sys, s64 ret)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct entry *e = bpf_map_lookup_elem(&entries, &tid);
	bool entered = e && e->sys == sys;

	if (!entered && !in_chamber())
		return 0;
	struct rec *r = reserve(K_AUDIT);

	if (r) {
		ids(r);
		r->sys = sys;
		r->ret = ret;
		r->ts = bpf_ktime_get_ns();
		if (entered) {
			r->flags = ENTERED;
			r->ts = e->ts;
			r->i0 = e->i0;
			r->i1 = e->i1;
			r->req = e->p1;
			r->a3 = e->p2;
			if (sys == SYS_MEMFD_CREATE) {
				if (bpf_probe_read_user_str(r->s, STRLEN, (const char *)e->p1) < 0)
					r->s[0] = 0;
				r->req = 0;
			}
		}
		submit(r);
	}
	if (entered)
		bpf_map_delete_elem(&entries, &tid);
	return 0;
}

#define AUDIT(name, tp, sys, a0, a1, a2, a3) \
	SEC("tracepoint/syscalls/sys_enter_" #tp) \
	int audit_enter_##name(struct trace_event_raw_sys_enter *ctx) { return audit_enter(sys, a0, a1, a2, a3); } \
	SEC("tracepoint/syscalls/sys_exit_" #tp) \
	int audit_exit_##name(struct trace_event_raw_sys_exit *ctx) { return audit_exit(sys, ctx->ret); }
/* Only the arguments the call has: a tracepoint program reading past its record is refused
 * at attach (EACCES). */
#define AUDIT2(name, sys) AUDIT(name, name, sys, ARG(0), ARG(1), 0, 0)
#define AUDIT3(name, sys) AUDIT(name, name, sys, ARG(0), ARG(1), ARG(2), 0)
#define AUDIT4(name, sys) AUDIT(name, name, sys, ARG(0), ARG(1), ARG(2), ARG(3))

AUDIT2(io_uring_setup, SYS_IO_URING_SETUP)
AUDIT4(io_uring_enter, SYS_IO_URING_ENTER)
AUDIT4(io_uring_register, SYS_IO_URING_REGISTER)
AUDIT3(open_by_handle_at, SYS_OPEN_BY_HANDLE_AT)
AUDIT4(name_to_handle_at, SYS_NAME_TO_HANDLE_AT)
AUDIT2(fanotify_init, SYS_FANOTIFY_INIT)
AUDIT4(fanotify_mark, SYS_FANOTIFY_MARK)
AUDIT4(mount, SYS_MOUNT)
AUDIT(umount2, umount, SYS_UMOUNT2, ARG(0), ARG(1), 0, 0)  /* its tracepoint is named umount */
AUDIT4(mount_setattr, SYS_MOUNT_SETATTR)
AUDIT3(open_tree, SYS_OPEN_TREE)
AUDIT4(move_mount, SYS_MOVE_MOUNT)
AUDIT2(fsopen, SYS_FSOPEN)
AUDIT4(fsconfig, SYS_FSCONFIG)
AUDIT3(fsmount, SYS_FSMOUNT)
AUDIT3(fspick, SYS_FSPICK)
AUDIT3(pidfd_getfd, SYS_PIDFD_GETFD)
AUDIT4(ptrace, SYS_PTRACE)
AUDIT(process_vm_readv, process_vm_readv, SYS_PROCESS_VM_READV, ARG(0), ARG(2), ARG(4), ARG(5))
AUDIT(process_vm_writev, process_vm_writev, SYS_PROCESS_VM_WRITEV, ARG(0), ARG(2), ARG(4), ARG(5))
AUDIT(memfd_create, memfd_create, SYS_MEMFD_CREATE, ARG(1), 0, ARG(0), 0)
AUDIT3(seccomp, SYS_SECCOMP)  /* a filter of the agent's own; one asking for a listener is refused */

/* --- processes --- */

/* The flags of each clone, fork and vfork in flight, by tid, read at its fork (CLONE_UNTRACED
 * among them: a child no tracer follows); gone at the call's return. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);  /* tid */
	__type(value, u64);
} clone_flags SEC(".maps");

static __always_inline int keep_flags(u64 flags)
{
	if (!in_chamber())
		return 0;
	u32 tid = (u32)bpf_get_current_pid_tgid();

	if (bpf_map_update_elem(&clone_flags, &tid, &flags, BPF_ANY))
		count_lost();
	return 0;
}

static __always_inline int drop_flags(void)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&clone_flags, &tid);
	return 0;
}

#define CLONE_VM 0x100
#define CLONE_VFORK 0x4000
#define SIGCHLD 17

SEC("tracepoint/syscalls/sys_enter_clone")
int enter_clone(struct trace_event_raw_sys_enter *ctx) { return keep_flags(ARG(0)); }
SEC("tracepoint/syscalls/sys_enter_clone3")
int enter_clone3(struct trace_event_raw_sys_enter *ctx)
{
	u64 flags = 0;  /* struct clone_args begins with its u64 flags */

	bpf_probe_read_user(&flags, sizeof(flags), (const void *)ARG(0));
	return keep_flags(flags);
}
SEC("tracepoint/syscalls/sys_enter_fork")
int enter_fork(struct trace_event_raw_sys_enter *ctx) { return keep_flags(SIGCHLD); }
SEC("tracepoint/syscalls/sys_enter_vfork")
int enter_vfork(struct trace_event_raw_sys_enter *ctx) { return keep_flags(CLONE_VM | CLONE_VFORK | SIGCHLD); }
SEC("tracepoint/syscalls/sys_exit_clone")
int exit_clone(struct trace_event_raw_sys_exit *ctx) { return drop_flags(); }
SEC("tracepoint/syscalls/sys_exit_clone3")
int exit_clone3(struct trace_event_raw_sys_exit *ctx) { return drop_flags(); }
SEC("tracepoint/syscalls/sys_exit_fork")
int exit_fork(struct trace_event_raw_sys_exit *ctx) { return drop_flags(); }
SEC("tracepoint/syscalls/sys_exit_vfork")
int exit_vfork(struct trace_event_raw_sys_exit *ctx) { return drop_flags(); }

/* A new task: its tid on the host (ret), its pid in the chamber (i0), whether it is a thread
 * (i1), and its clone's flags (req). A BTF tracepoint: it hands over the child's task. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!in_chamber())
		return 0;
	struct rec *r = reserve(K_FORK);

	if (!r)
		return 0;
	ids(r);
	r->ts = bpf_ktime_get_ns();
	r->ret = BPF_CORE_READ(child, pid);
	r->i1 = BPF_CORE_READ(child, tgid) != BPF_CORE_READ(child, pid);
	r->i0 = upid_at(BPF_CORE_READ(child, thread_pid)).nr;
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 *flags = bpf_map_lookup_elem(&clone_flags, &tid);

	r->req = flags ? *flags : 0;
	submit(r);
	return 0;
}

/* --- exits: one record per thread group, when its last thread exits. Newer kernels say so
 * in the tracepoint (group_dead); older ones (Debian 12's 6.1) do not: there the group
 * is dead once its signal_struct's live count is 0, which do_exit() decrements before the
 * tracepoint, and which several threads of an exit_group() can see at once: the first to
 * claim the group (tgid, start time) in `exited` reports it. Both are CO-RE: the field's
 * existence is settled when the program is loaded on the running kernel. --- */

struct trace_event_raw_sched_process_exit___group_dead {
	bool group_dead;
} __attribute__((preserve_access_index));

struct group_key {
	u64 start;  /* the group leader's start_time, ns since boot */
	u32 tgid;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct group_key);
	__type(value, u8);
} exited SEC(".maps");

SEC("tracepoint/sched/sched_process_exit")
int on_exit(struct trace_event_raw_sched_process_exit___group_dead *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
#ifdef CAISSON_EXIT_BY_LIVE  /* the older kernels' way on a newer one (scripts/build_ebpf.sh, tests) */
	bool claim = true;
#else
	bool claim = !bpf_core_field_exists(ctx->group_dead);
#endif

	if (claim ? t->signal->live.counter != 0 : !ctx->group_dead)
		return 0;
	if (!in_chamber())
		return 0;
	if (claim) {
		struct group_key key = {.start = t->group_leader->start_time, .tgid = t->tgid};
		u8 one = 1;

		/* -EEXIST: another thread of the group reported it; a full map (-ENOMEM) must not
		 * hide the exit */
		if (bpf_map_update_elem(&exited, &key, &one, BPF_NOEXIST) == -17)
			return 0;
	}
	struct rec *r = reserve(K_EXIT);

	if (!r)
		return 0;
	ids(r);
	r->ts = bpf_ktime_get_ns();
	r->ret = t->exit_code;
	submit(r);
	return 0;
}

/* --- io_uring: an open submitted through the ring is prepared (its path copied in) before
 * this tracepoint fires; 18 is IORING_OP_OPENAT, 28 IORING_OP_OPENAT2
 * (include/uapi/linux/io_uring.h). The request starts with its command data, an io_open.
 * The tracepoint is io_uring_submit_req from Linux 6.4 on, io_uring_submit_sqe before (6.1):
 * one program for each name, and the loader loads the one the running kernel has. --- */

struct trace_event_raw_io_uring_submit_req___x {
	void *req;
	u8 opcode;
} __attribute__((preserve_access_index));

struct trace_event_raw_io_uring_submit_sqe___x {
	void *req;
	u8 opcode;
} __attribute__((preserve_access_index));

static __always_inline int uring_submit(u8 op, void *request)
{
	bool open = op == 18 || op == 28;

	if (!(open || op == 16 || (op >= 35 && op <= 39) || op == 21) || !in_chamber())
		return 0;
	u64 req = (u64)request;

	if (!open) {
		struct rec *r = reserve(K_URING);

		if (!r)
			return 0;
		ids(r);
		r->ts = bpf_ktime_get_ns();
		r->ret = op;
		r->req = req;
		submit(r);
		return 0;
	}
	/* an open: its path (the kernel's copy, up to PATHLEN) and, when relative, its dirfd's
	 * path (Y i0) before the U line */
	struct scratch *sc = scratch();
	struct io_open *o = (struct io_open *)request;
	const char *name = BPF_CORE_READ(o, filename, name);
	u8 one = 1;
	long n;

	if (!sc) {
		count_lost();
		return 0;
	}
	head(&sc->name.r, K_URING);
	ids(&sc->name.r);
	sc->name.r.ts = bpf_ktime_get_ns();
	sc->name.r.ret = op;
	sc->name.r.req = req;
	sc->name.r.flags = HAS_PATH;
	sc->name.r.i0 = BPF_CORE_READ(o, dfd);
	sc->name.r.i1 = (s32)BPF_CORE_READ(o, how.flags);
	n = bpf_probe_read_kernel_str(sc->name.r.s, PATHLEN, name);
	if (n <= 0) {
		sc->name.r.s[0] = 0;
		n = 1;
	}
	if (relative(&sc->name))
		fd_line(sc->name.r.tid, Y_I0, sc->name.r.i0);
	if (bpf_map_update_elem(&urings, &req, &one, BPF_ANY))
		count_lost();  /* its completion will not be printed */
	output(&sc->name, n);
	return 0;
}

SEC("tracepoint/io_uring/io_uring_submit_req")
int on_uring_submit(struct trace_event_raw_io_uring_submit_req___x *ctx)
{
	return uring_submit(ctx->opcode, ctx->req);
}

SEC("tracepoint/io_uring/io_uring_submit_sqe")
int on_uring_submit_sqe(struct trace_event_raw_io_uring_submit_sqe___x *ctx)
{
	return uring_submit(ctx->opcode, ctx->req);
}

SEC("tracepoint/io_uring/io_uring_complete")
int on_uring_complete(struct trace_event_raw_io_uring_complete *ctx)
{
	u64 req = (u64)ctx->req;

	if (!bpf_map_lookup_elem(&urings, &req))
		return 0;
	bpf_map_delete_elem(&urings, &req);
	struct rec *r = reserve(K_URING_DONE);

	if (!r)
		return 0;
	u64 pt = bpf_get_current_pid_tgid();
	r->tgid = pt >> 32;
	r->tid = (u32)pt;
	r->ts = bpf_ktime_get_ns();
	r->req = req;
	r->i0 = ctx->res;
	submit(r);
	return 0;
}
