package target

import (
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Ctrl-Z (SIGTSTP) would stop rbscope while a target stands still, and so
// leave the target stopped (state t) until rbscope is continued. Once
// rbscope has paused a target it is caught for the rest of its life: while
// a target is paused it is held back, and rbscope stops itself (SIGSTOP) once
// every target it paused runs again; otherwise it stops at once.
var (
	stopGuardOnce sync.Once
	pendingStop   bool // under pausedMu: a stop signal came while a target was paused
)

// startStopGuard installs the stop-signal guard, once.
func startStopGuard() {
	stopGuardOnce.Do(func() {
		ch := make(chan os.Signal, 4)
		// Only SIGTSTP (Ctrl-Z): a caught SIGTTOU or SIGTTIN would make a
		// background terminal write or read restart for ever (tostop),
		// and a progress bar writes while the target is paused.
		signal.Notify(ch, unix.SIGTSTP)
		go func() {
			for range ch {
				pausedMu.Lock()
				if len(pausedSet) > 0 {
					pendingStop = true
					pausedMu.Unlock()
					continue
				}
				pausedMu.Unlock()
				stopSelf()
			}
		}()
	})
}

// stopSelf stops rbscope as the signal's default action would have.
func stopSelf() { _ = unix.Kill(os.Getpid(), unix.SIGSTOP) }
