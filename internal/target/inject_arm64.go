package target

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errInjectArch refuses what needs a borrowed thread on arm64: rbscope
// knows x86_64's system-call instruction and calling convention only
// (inject_amd64.go), so exec and alloc are refused there.
var errInjectArch = fmt.Errorf("running code in a process is implemented on x86_64 only: %w", errors.ErrUnsupported)

// Syscall is refused on arm64 (errInjectArch).
func (s *Stopped) Syscall(tid int, nr uint64, args ...uint64) (int64, error) {
	return 0, errInjectArch
}

// Call is refused on arm64 (errInjectArch).
func (s *Stopped) Call(tid int, fn uint64, args ...uint64) (uint64, error) {
	return 0, errInjectArch
}

// borrow is refused on arm64 (errInjectArch).
func (s *Stopped) borrow(tid int, f func(saved *unix.PtraceRegs) error) error {
	return errInjectArch
}
