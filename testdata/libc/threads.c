/* threads: starts three threads and prints, for the main thread and each
 * of them, its pthread_t and the kernel TID it has (gettid), then "ready"
 * and sleeps until killed. Package libc's tests read each TID from the C
 * library's struct pthread from outside and compare. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started;

static void report(void) {
	pthread_mutex_lock(&mu);
	printf("%lu %ld\n", (unsigned long)pthread_self(), (long)syscall(SYS_gettid));
	started++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void *run(void *arg) {
	(void)arg;
	report();
	for (;;) pause();
	return 0;
}

int main(void) {
	pthread_t t[3];
	report();
	for (int i = 0; i < 3; i++)
		if (pthread_create(&t[i], 0, run, 0)) return 1;
	pthread_mutex_lock(&mu);
	while (started < 4) pthread_cond_wait(&cv, &mu);
	printf("ready\n");
	fflush(stdout);
	pthread_mutex_unlock(&mu);
	for (;;) pause();
}
