/* privlib: a shared library the test builds into a temporary directory,
 * links privmain against and then deletes, so that a core of privmain
 * lacks it as a core from another machine would. priv_outer (exported)
 * calls priv_inner (static: not in the dynamic symbol table), which prints
 * "ready" and waits in pause. */
#include <stdio.h>
#include <unistd.h>

volatile int priv_depth;

__attribute__((noinline)) static void priv_inner(void) {
	char buf[64];
	snprintf(buf, sizeof buf, "ready %d\n", priv_depth);
	fputs(buf, stdout);
	fflush(stdout);
	for (;;) pause();
}

__attribute__((noinline)) void priv_outer(void) {
	priv_depth++;
	priv_inner();
	priv_depth++;
}
