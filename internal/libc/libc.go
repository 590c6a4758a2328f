// Package libc names the C library a process runs on, from its mappings,
// and keeps what rbscope knows of that library's internals that no symbol
// or debugger descriptor tells.
package libc

import (
	"encoding/binary"
	"path/filepath"
	"strings"

	"github.com/rbscope/rbscope/internal/target"
)

// Kind names a C library.
type Kind string

// The C libraries rbscope tells apart.
const (
	Unknown Kind = "unknown"
	Glibc   Kind = "glibc"
	Musl    Kind = "musl"
)

// IsMusl reports whether a mapping's path is musl's C library (which is
// also its dynamic loader): Alpine's /lib/ld-musl-x86_64.so.1 and
// /lib/libc.musl-x86_64.so.1, or Debian's musl at
// /usr/lib/x86_64-linux-musl/libc.so.
func IsMusl(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "ld-musl-") || strings.HasPrefix(base, "libc.musl-") ||
		(base == "libc.so" && strings.Contains(path, "musl"))
}

// IsGlibc reports whether a mapping's path is glibc's libc.
func IsGlibc(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "libc.so.6") || strings.HasPrefix(base, "libc-2.")
}

// Name returns the C library mapped in a process: musl when musl's is
// mapped, else glibc when glibc's is, else Unknown (a static program).
func Name(maps []target.Mapping) Kind {
	glibc := false
	for _, m := range maps {
		if IsMusl(m.Path) {
			return Musl
		}
		glibc = glibc || IsGlibc(m.Path)
	}
	if glibc {
		return Glibc
	}
	return Unknown
}

// musl's struct pthread (src/internal/pthread_impl.h, musl 1.2) on x86_64
// starts with its own address (self), then dtv, prev, next, sysinfo and
// the stack canary, each a word, and then the kernel TID as an int; after
// four more ints and map_base and map_size, the top of the thread's stack
// (0 for the main thread, whose stack is the process's). A pthread_t, and
// a thread's fs_base, is that struct's address. musl exports no
// descriptor of it (glibc's _thread_db_* have no counterpart), so the
// offsets are known here.
const (
	MuslPthreadSelf  = 0
	MuslPthreadTID   = 48
	MuslPthreadStack = 88
)

// Reader reads a process's memory.
type Reader interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// MuslStackTop returns the top of the stack of the thread whose struct
// pthread is at pt (its fs_base), read from musl's struct pthread, whose
// self pointer must be pt; ok is false for the main thread, whose struct
// records no stack.
func MuslStackTop(r Reader, pt uint64) (top uint64, ok bool) {
	var b [MuslPthreadStack + 8]byte
	if pt == 0 || target.ReadFull(r, b[:], pt) != nil {
		return 0, false
	}
	if binary.LittleEndian.Uint64(b[MuslPthreadSelf:]) != pt {
		return 0, false
	}
	top = binary.LittleEndian.Uint64(b[MuslPthreadStack:])
	return top, top != 0
}
