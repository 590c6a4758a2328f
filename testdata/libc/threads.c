/* threads: starts three threads and prints, for the main thread and each
 * of them, its pthread_t, the kernel TID it has (gettid) and the top of its
 * stack as pthread_getattr_np tells it (0 for the main thread), then
 * "ready" and sleeps until killed. Package libc's tests read each from the
 * C library's struct pthread from outside and compare. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started;

static void report(int main) {
	unsigned long top = 0;
	if (!main) {
		pthread_attr_t a;
		void *addr;
		size_t size;
		if (pthread_getattr_np(pthread_self(), &a) || pthread_attr_getstack(&a, &addr, &size)) _exit(1);
		top = (unsigned long)addr + size;
	}
	pthread_mutex_lock(&mu);
	printf("%lu %ld %lu\n", (unsigned long)pthread_self(), (long)syscall(SYS_gettid), top);
	started++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void *run(void *arg) {
	(void)arg;
	report(0);
	for (;;) pause();
	return 0;
}

int main(void) {
	pthread_t t[3];
	report(1);
	for (int i = 0; i < 3; i++)
		if (pthread_create(&t[i], 0, run, 0)) return 1;
	pthread_mutex_lock(&mu);
	while (started < 4) pthread_cond_wait(&cv, &mu);
	printf("ready\n");
	fflush(stdout);
	pthread_mutex_unlock(&mu);
	for (;;) pause();
}
