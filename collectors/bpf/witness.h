/*
 * The record the eBPF witness's kernel program (witness.bpf.c) writes into its BPF ring
 * buffer and its loader (loader.c) prints as lines of collectors/ebpf.py's grammar.
 * Shared by both sides; plain C types only (the BPF side includes vmlinux.h first).
 */
#ifndef CAISSON_WITNESS_H
#define CAISSON_WITNESS_H

/* Bytes kept per string, its NUL included: at most STRLEN - 1 bytes of a string are
 * copied, as bpftrace 0.17 does with BPFTRACE_STRLEN=200 (collectors.ebpf.STRING_LIMIT).
 * Path arguments (and io_uring's open paths) are read up to PATHLEN - 1 bytes instead:
 * PATH_MAX (4096, its NUL included) and one byte more, so a string the kernel refuses as
 * too long (ENAMETOOLONG) reads as cut, and no name the kernel accepts is. */
#define STRLEN 200
#define PATHLEN 4097
#define WALK_END 4096  /* a path the program walks in the kernel is at most this long (no NUL) */
#define ARGV_MAX 64  /* argv strings kept per exec; more: a "T <tid> argv" line */
#define ENV_MAX 128  /* environment strings kept per exec; more: "T <tid> env" */

/* Record kinds (struct rec.kind): the line each one prints. */
enum {
	K_EXEC = 'E',     /* E line of an exec (its path: the K_FIRST record after it) */
	K_ARG = 'A',      /* A line: one argv string */
	K_ENV = 'V',      /* V line: one environment string */
	K_SEAL = 'Z',     /* T lines (flags: CUT_*) and the Z line: the exec's strings are complete */
	K_CONNECT = 'C',  /* E line of a connect, its S line (address, by family) and Z */
	K_FCHDIR = 'D',   /* E line of an fchdir and Z */
	K_FIRST = 'S',    /* S line: an exec's path, or a rename's or link's first name before its O */
	K_DONE = 'O',     /* O line: an open or change returned (ts: its entry) */
	K_RET = 'R',      /* R line: a call returned */
	K_FORK = 'F',
	K_EXIT = 'Q',
	K_URING = 'U',    /* U line of an io_uring submission (flags: HAS_PATH) */
	K_URING_DONE = 'K',
	K_AUDIT = 'P',    /* P line: an audited or denied call returned (flags: ENTERED) */
	K_SEND = 'N',     /* E line of a send naming a destination (i0: flags) */
	K_DEST = 'd',       /* N line: one destination of that send (i0 family, i1 port, s address) */
	K_CUT_DESTS = 't',  /* "T <tid> dests" (sendmmsg: messages past MMSG_MAX unread) */
	K_PATH = 'Y',       /* Y line: a path the kernel holds (i0: Y_*, i1: P_*), before its O, U or in an exec's E..Z */
};
/* K_PATH: which path (the grammar's field name) */
enum { Y_I0, Y_I1, Y_RET, Y_CWD };
/* K_PATH: how its walk ended (the grammar's state) */
enum {
	P_OK,    /* the path, whole */
	P_CUT,   /* longer than WALK_END bytes: not given */
	P_NONE,  /* no path in the chamber's tree (a pipe, a socket, an anonymous inode; outside its root) */
	P_BADF,  /* no open file at that fd */
};
#define CUT_ARGV 1
#define CUT_ENV 2
#define HAS_PATH 4
#define ENTERED 8  /* K_AUDIT: its sys_enter fired (a call seccomp refuses never enters) */
#define MMSG_MAX 64  /* sendmmsg messages whose msg_name is read */

/* Syscalls (struct rec.sys): index into the loader's table of tracepoint names. */
enum {
	SYS_EXECVE, SYS_EXECVEAT, SYS_OPENAT, SYS_OPENAT2, SYS_OPEN, SYS_CREAT, SYS_UNLINK, SYS_RMDIR,
	SYS_MKDIR, SYS_CHDIR, SYS_UNLINKAT, SYS_MKDIRAT, SYS_RENAME, SYS_RENAMEAT, SYS_RENAMEAT2,
	SYS_SYMLINK, SYS_LINK, SYS_SYMLINKAT, SYS_LINKAT, SYS_CHMOD, SYS_FCHMODAT, SYS_TRUNCATE,
	SYS_FCHDIR, SYS_CONNECT, SYS_MKNOD, SYS_MKNODAT, SYS_SENDTO, SYS_SENDMSG, SYS_SENDMMSG,
	/* audited (collectors._strace_parser.AUDITED_SYSCALLS): P lines */
	SYS_IO_URING_SETUP, SYS_IO_URING_ENTER, SYS_IO_URING_REGISTER, SYS_OPEN_BY_HANDLE_AT,
	SYS_NAME_TO_HANDLE_AT, SYS_FANOTIFY_INIT, SYS_FANOTIFY_MARK, SYS_MOUNT, SYS_UMOUNT2,
	SYS_MOUNT_SETATTR, SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT,
	SYS_FSPICK, SYS_PIDFD_GETFD, SYS_PTRACE, SYS_PROCESS_VM_READV, SYS_PROCESS_VM_WRITEV,
	SYS_MEMFD_CREATE, SYS_SECCOMP, SYS_COUNT
};

/* A record. K_DONE, K_FIRST, K_PATH and K_URING with HAS_PATH are written with the length of
 * their string (`struct lrec`, up to PATHLEN bytes, its NUL included): the ring callback's
 * size less offsetof(struct rec, s). The others are sizeof(struct rec). */
struct rec {
	unsigned char kind;   /* K_* */
	unsigned char sys;    /* SYS_* */
	unsigned char flags;  /* CUT_*, HAS_PATH */
	unsigned char pad;
	int tgid, tid;        /* the host's */
	int nspid;            /* the process's pid in the chamber's namespace */
	int i0, i1;           /* as the grammar's i0/i1 (U: dfd and flags; K: res in i0) */
	long long ret;        /* return value; F: child tid; Q: exit code; U: opcode */
	unsigned long long ts;   /* CLOCK_MONOTONIC ns */
	unsigned long long req;  /* U, K: the io_uring request's address; P: its third argument */
	unsigned long long a3;   /* P: its fourth argument */
	char s[STRLEN];       /* the string; C: the raw address (AF_INET, AF_INET6) */
};

/* A record with a string of up to PATHLEN bytes: `r.s` runs on into `more`. */
struct lrec {
	struct rec r;
	char more[PATHLEN - STRLEN];
};

#endif
