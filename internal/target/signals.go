package target

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// rbscope's main package owns its signals; what follows is what it asks of
// the stopped-target sessions so that no signal leaves a target stopped.
//
// A target stands still only inside WhilePaused, on the tracer thread, and
// only that thread may let it go: it may be in the middle of a long read
// that does not look at any context. So on SIGINT, SIGTERM or SIGHUP while
// a target stands still (HoldsStopped), rbscope exits at once, after
// PrepareExit, and the kernel lets every thread it traces go (none is in a
// group stop). Ctrl-Z (SIGTSTP) would stop rbscope while a target stands
// still, and so leave the target stopped (state t) until rbscope is
// continued: Stop holds rbscope's stop back until every target it paused
// runs again.

var (
	pausedMu sync.Mutex
	// pausedSet holds the targets that may have threads stopped, each
	// with whether a signal ending rbscope must end it at once (see
	// HoldsStopped).
	pausedSet   = map[*Live]bool{}
	pendingStop bool // a stop signal came while a target was paused
)

// registerPaused records that l may hold threads stopped from now on.
func registerPaused(l *Live) {
	pausedMu.Lock()
	pausedSet[l] = !l.NoSignalGuard
	pausedMu.Unlock()
}

// unregisterPaused records that l's threads run again; a stop held back
// while targets were paused takes effect when the last one runs.
func unregisterPaused(l *Live) {
	pausedMu.Lock()
	delete(pausedSet, l)
	stop := pendingStop && len(pausedSet) == 0
	if stop {
		pendingStop = false
	}
	pausedMu.Unlock()
	if stop {
		stopSelf()
	}
}

// HoldsStopped reports whether a target may stand still in a session that
// a signal ending rbscope must not wait for: rbscope must then exit at
// once, after PrepareExit. The sessions of a Live with NoSignalGuard (short
// ones, whose owner ends between them on the signal) do not count.
func HoldsStopped() bool {
	pausedMu.Lock()
	defer pausedMu.Unlock()
	for _, exitNow := range pausedSet {
		if exitNow {
			return true
		}
	}
	return false
}

// PrepareExit is called before rbscope exits on a signal. It waits until
// no thread of any target is borrowed for an injected call (at most
// InjectTimeout and a second): on rbscope's exit the kernel would let that
// thread go with borrowed registers. Once it returns, exiting lets every
// thread still stopped go.
func PrepareExit() {
	for deadline := time.Now().Add(InjectTimeout + time.Second); borrowing() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// Stop stops rbscope as SIGTSTP's default action would, for the owner of
// its signals to call on SIGTSTP: at once when no target it paused stands
// still, else once every such target runs again.
func Stop() {
	pausedMu.Lock()
	if len(pausedSet) > 0 {
		pendingStop = true
		pausedMu.Unlock()
		return
	}
	pausedMu.Unlock()
	stopSelf()
}

// stopSelf stops rbscope as the signal's default action would have.
func stopSelf() { _ = unix.Kill(os.Getpid(), unix.SIGSTOP) }
