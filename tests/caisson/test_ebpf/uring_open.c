/* Opens argv[1] with io_uring (IORING_OP_OPENAT) and reads it with IORING_OP_READ, without
 * an openat or read syscall of its own: the probe of the eBPF witness's io_uring coverage.
 * Raw syscalls, no liburing. Exit 0 when the file was read, 1 otherwise. */
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int submit_one(int ring, struct io_uring_params *p, char *sq, char *cq, struct io_uring_sqe *sqes,
                      const struct io_uring_sqe *sqe) {
    unsigned *tail = (unsigned *)(sq + p->sq_off.tail), *array = (unsigned *)(sq + p->sq_off.array);
    unsigned mask = *(unsigned *)(sq + p->sq_off.ring_mask), idx = *tail & mask;
    sqes[idx] = *sqe;
    array[idx] = idx;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) return -1000;
    unsigned *head = (unsigned *)(cq + p->cq_off.head);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p->cq_off.cqes);
    unsigned cmask = *(unsigned *)(cq + p->cq_off.ring_mask);
    int res = cqes[*head & cmask].res;
    __atomic_store_n(head, *head + 1, __ATOMIC_RELEASE);
    return res;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = syscall(__NR_io_uring_setup, 4, &p);
    if (ring < 0) { perror("io_uring_setup"); return 1; }
    char *sq = mmap(0, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE, MAP_SHARED,
                    ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe), PROT_READ | PROT_WRITE,
                    MAP_SHARED, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { perror("mmap"); return 1; }
    struct io_uring_sqe sqe;
    memset(&sqe, 0, sizeof sqe);
    sqe.opcode = IORING_OP_OPENAT;
    sqe.fd = AT_FDCWD;
    sqe.addr = (unsigned long)argv[1];
    sqe.open_flags = O_RDONLY;
    int fd = submit_one(ring, &p, sq, cq, sqes, &sqe);
    if (fd < 0) { fprintf(stderr, "openat through io_uring: %d\n", fd); return 1; }
    static char buf[4096];
    memset(&sqe, 0, sizeof sqe);
    sqe.opcode = IORING_OP_READ;
    sqe.fd = fd;
    sqe.addr = (unsigned long)buf;
    sqe.len = sizeof buf;
    int n = submit_one(ring, &p, sq, cq, sqes, &sqe);
    if (n <= 0) { fprintf(stderr, "read through io_uring: %d\n", n); return 1; }
    printf("read %d bytes through io_uring\n", n);
    return 0;
}
