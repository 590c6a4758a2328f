// Package tempfiles keeps the names of the temporary files rbscope is
// writing (outputs before they are renamed into place), so that an exit on
// a signal while a target stands still removes them instead of leaving a
// half-written file behind.
package tempfiles

import (
	"os"
	"sync"
)

var (
	mu    sync.Mutex
	names = map[string]bool{}
)

// Add records a temporary file being written.
func Add(name string) {
	mu.Lock()
	names[name] = true
	mu.Unlock()
}

// Forget drops a file that was renamed into place or removed.
func Forget(name string) {
	mu.Lock()
	delete(names, name)
	mu.Unlock()
}

// RemoveAll removes every temporary file still recorded: for the last
// moments of rbscope, before it exits on a signal.
func RemoveAll() {
	mu.Lock()
	defer mu.Unlock()
	for name := range names {
		os.Remove(name)
		delete(names, name)
	}
}
