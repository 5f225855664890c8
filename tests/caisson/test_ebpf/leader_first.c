/* The group leader exits first with 0 (exit(2), not exit_group), a second thread 0.2 s later
 * with 7: the process's wait status is 7, the last thread's (measured: `echo $?`, strace's
 * "+++ exited with 7 +++"), which the witness must report, not the leader's 0. */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *late(void *arg)
{
	(void)arg;
	usleep(200000);
	syscall(SYS_exit, 7);
	return NULL;
}

int main(void)
{
	pthread_t t;

	pthread_create(&t, NULL, late, NULL);
	syscall(SYS_exit, 0);
	return 1;
}
