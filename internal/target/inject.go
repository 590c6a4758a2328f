package target

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
)

// This file lets rbscope borrow a paused thread of a live process for a
// moment: run one system call or one function call on it, then put every
// register back. The thread's own work is untouched: general and vector
// registers are restored, and a system call it was blocked in is restarted
// by the kernel when the thread resumes, as after a signal handler.

// InjectTimeout bounds one injected call or system call.
const InjectTimeout = 5 * time.Second

// writeAt writes p to the process's memory at addr (Stopped.WriteAt).
func (l *Live) writeAt(p []byte, addr uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := l.CheckSame(); err != nil {
		return 0, err
	}
	if l.id.mem == nil {
		return 0, fmt.Errorf("pid %d: write at %#x: its memory could not be opened at attach: %w", l.pid, addr, ErrPermission)
	}
	n, err := l.id.mem.WriteAt(p, int64(addr))
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EBADF) {
			err = fmt.Errorf("%w (its memory was opened read-only)", ErrPermission)
		}
		return n, fmt.Errorf("pid %d: write at %#x: %w", l.pid, addr, err)
	}
	return n, nil
}

// ErrSegvBlocked means the thread blocks SIGSEGV right now (it runs a
// signal handler, for example), so no function can be called on it until
// it unblocks the signal: try again a moment later.
var ErrSegvBlocked = errors.New("the thread blocks SIGSEGV right now")

// segvMasked reads whether tid blocks or ignores SIGSEGV.
func segvMasked(pid, tid int) (blocked, ignored bool, err error) {
	blk, ign, err := procfs.SignalMasks(pid, tid)
	if err != nil {
		if _, gone := errors.AsType[*fs.PathError](err); gone {
			return false, false, fmt.Errorf("tid %d: %w", tid, ErrExited)
		}
		return false, false, err
	}
	bit := uint64(1) << (uint(unix.SIGSEGV) - 1)
	return blk&bit != 0, ign&bit != 0, nil
}

// borrowing tells whether a thread of some target is borrowed right now.
func borrowing() bool {
	oomHold.Lock()
	defer oomHold.Unlock()
	return oomHold.count > 0
}

// waitAnyStop waits for tid's next ptrace stop and returns its signal.
func (l *Live) waitAnyStop(tid int, deadline time.Time) (unix.Signal, error) {
	delay := 10 * time.Microsecond
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(tid, &ws, unix.WNOHANG|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			delete(l.paused, tid)
			return 0, fmt.Errorf("wait: %w", ErrExited)
		case pid == tid && ws.Stopped():
			return ws.StopSignal(), nil
		case pid == tid:
			delete(l.paused, tid)
			return 0, ErrExited
		}
		if time.Now().After(deadline) {
			_ = unix.PtraceInterrupt(tid)
			if pid, _ := unix.Wait4(tid, &ws, unix.WALL, nil); pid != tid || !ws.Stopped() {
				delete(l.paused, tid)
				return 0, ErrExited
			}
			return 0, fmt.Errorf("did not finish within %v", InjectTimeout)
		}
		time.Sleep(delay)
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// oomScoreAdjPath is rbscope's own oom_score_adj (a test may point it at
// a plain file where it cannot lower the value).
var oomScoreAdjPath = "/proc/self/oom_score_adj"

// holdOffOOM sets rbscope's own oom_score_adj to -1000, so that the OOM
// killer does not pick rbscope while it holds a thread of the target in
// the middle of an injected call, and returns what puts the old value
// back. A tracer that dies there (killed, by the OOM killer or anyone
// with SIGKILL) lets the thread go on with the borrowed registers, and
// the target then crashes: the kernel detaches it, and nothing restores
// its registers. Without CAP_SYS_RESOURCE the value cannot be lowered and
// nothing changes.
func holdOffOOM() (restore func()) {
	oomHold.Lock()
	defer oomHold.Unlock()
	if oomHold.count == 0 {
		oomHold.old = nil
		old, err := os.ReadFile(oomScoreAdjPath)
		if err == nil && strings.TrimSpace(string(old)) != "-1000" && os.WriteFile(oomScoreAdjPath, []byte("-1000"), 0) == nil {
			oomHold.old = old
		}
	}
	oomHold.count++
	return func() {
		oomHold.Lock()
		defer oomHold.Unlock()
		if oomHold.count--; oomHold.count == 0 && oomHold.old != nil {
			_ = os.WriteFile(oomScoreAdjPath, oomHold.old, 0)
		}
	}
}

// oomHold counts the borrows under way (targets are borrowed from
// concurrently, one tracer thread each): the first saves and lowers
// rbscope's oom_score_adj, the last puts it back.
var oomHold struct {
	sync.Mutex
	count int
	old   []byte // the value to put back; nil when nothing was changed
}
