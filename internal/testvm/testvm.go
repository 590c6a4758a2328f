// Package testvm opens the Ruby VM of a live test process. It stands apart
// from testruby because internal/target's own tests use testruby, and
// rubyvm imports target.
package testvm

import (
	"errors"
	"testing"

	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// Attach attaches to the live process pid and opens its Ruby VM; both are
// closed when the test ends. A permission refusal skips the test (a
// benchmark run as an ordinary user); any other error fails it.
func Attach(t testing.TB, pid int) (*target.Live, *rubyvm.VM) {
	t.Helper()
	p, err := liveproc.Open(pid, liveproc.Options{})
	if errors.Is(err, target.ErrPermission) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p.Live, p.VM
}

// Paused runs read with every thread of vm's live target stopped, in one
// target.WhilePaused session, and returns read's error (or the stop's).
func Paused(t testing.TB, vm *rubyvm.VM, read func() error) error {
	t.Helper()
	l, ok := vm.T.(*target.Live)
	if !ok {
		t.Fatalf("%T is not a live target", vm.T)
	}
	return l.WhilePaused(nil, func(*target.Stopped) error { return read() })
}
