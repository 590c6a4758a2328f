/* A C library a Ruby program calls through Fiddle: rbscope_big_frame holds
 * a frame of about 300 KB, is built without frame pointers, and calls back
 * into Ruby (which then sleeps), so the native stack runs Ruby, C, Ruby. */
#include <string.h>

typedef void (*callback)(void);

__attribute__((noinline)) void rbscope_big_frame(callback cb) {
    volatile char buf[300000];
    memset((char *)buf, 1, sizeof buf);
    cb();
    buf[0] = buf[sizeof buf - 1];
}
