/* nounwind: a program built without unwind tables (-fno-asynchronous-
 * unwind-tables) whose call frame information is only in the .debug_frame
 * of its separate debug file, as musl's C library's is. Its main thread
 * calls outer, which calls inner, which prints "ready" and waits in
 * pause. */
#include <stdio.h>
#include <unistd.h>

volatile int depth;

__attribute__((noinline)) static void inner(void) {
	char buf[256];
	snprintf(buf, sizeof buf, "ready %d\n", depth);
	fputs(buf, stdout);
	fflush(stdout);
	for (;;) pause();
}

__attribute__((noinline)) static void outer(void) {
	depth++;
	inner();
	depth++;
}

int main(void) {
	outer();
	return depth;
}
