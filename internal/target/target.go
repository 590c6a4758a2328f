// Package target gives uniform access to the memory, mappings, threads and
// registers of a process being inspected. A live process, a core file and a
// snapshot of a paused process are three implementations of one Target, so
// every reader above this package works on all of them.
package target

import (
	"errors"
	"fmt"
	"os"

	"github.com/rbscope/rbscope/internal/procfs"
)

// Target is a process image rbscope reads from.
type Target interface {
	// PID is the process ID the image belongs to.
	PID() int
	// ReadAt reads len(p) bytes at addr in the target's address space. A
	// short read returns the bytes read and an error.
	ReadAt(p []byte, addr uint64) (int, error)
	// Mappings lists the memory mappings of the image.
	Mappings() ([]Mapping, error)
	// Threads lists the native thread IDs of the image.
	Threads() ([]int, error)
	// Registers returns the general registers of thread tid: a core's or a
	// snapshot's as they were recorded, a live process's while it is
	// paused (inside Hold or Live.WhilePaused, on the goroutine that runs
	// its function). A thread without registers to give is
	// ErrNoRegisters.
	Registers(tid int) (Regs, error)
	// Open opens a file as the target sees it (inside its mount namespace
	// for a live process in a container).
	Open(path string) (*os.File, error)
	// Close releases what the target holds, resuming it if paused.
	Close() error
}

// Mapping is one region of the address space, as /proc/PID/maps shows it
// (a core's and a snapshot's are told the same way).
type Mapping = procfs.Mapping

// Errors a caller may want to tell apart.
var (
	// ErrNoProcess means the PID does not name a running process.
	ErrNoProcess = errors.New("no such process")
	// ErrPermission means the kernel refused access to the process.
	ErrPermission = errors.New("permission denied")
	// ErrExited means the process went away while it was being read.
	ErrExited = errors.New("process exited")
	// ErrNoRegisters means the target holds no registers for a thread: a
	// live thread that is not paused, or a thread the core has no note of.
	ErrNoRegisters = errors.New("no registers")
)

// FindMapping returns the mapping that contains addr.
func FindMapping(maps []Mapping, addr uint64) (Mapping, bool) {
	for _, m := range maps {
		if m.Contains(addr) {
			return m, true
		}
	}
	return Mapping{}, false
}

// Reader reads a process's memory: a Target, or a Stopped session.
type Reader interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// ReadFull reads exactly len(p) bytes at addr or fails.
func ReadFull(t Reader, p []byte, addr uint64) error {
	n, err := t.ReadAt(p, addr)
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("short read")
	}
	return fmt.Errorf("read %d bytes at %#x: %w", len(p), addr, err)
}
