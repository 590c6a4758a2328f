/* blocks: allocates blocks of many sizes, prints for each its address,
 * the size asked for and what the allocator's own malloc_usable_size says,
 * then "ready" and sleeps until killed. The malloc package's tests size
 * the same blocks from outside and compare. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
	static const size_t sizes[] = {
		1, 8, 16, 24, 40, 100, 200, 248, 500, 1000, 1500, 2000, 4000,
		5000, 9000, 15000, 20000, 40000, 70000, 100000, 300000, 1 << 20,
	};
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			void *p = malloc(sizes[i]);
			if (!p) return 1;
			printf("%p %zu %zu\n", p, sizes[i], malloc_usable_size(p));
		}
	}
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
