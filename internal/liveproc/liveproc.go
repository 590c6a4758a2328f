// Package liveproc opens a live process and the Ruby VM it runs, for every
// command, the UI, the crash handler and both samplers: the live
// counterpart of corefile. Only it and corefile open a Ruby VM
// (TestOnlyLiveprocAndCorefileOpenVMs).
package liveproc

import (
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// Process is an open live process and its Ruby VM.
type Process struct {
	*target.Live
	VM *rubyvm.VM
}

// Options say how a process is opened.
type Options struct {
	// VM are the options of finding its VM (--force-version, the
	// BuildCache shared by the processes of one run).
	VM rubyvm.Options
	// NoSignalGuard is for a caller that handles Ctrl-C itself and
	// resumes the process before it ends (target.Live.NoSignalGuard).
	NoSignalGuard bool
}

// VMError is Open's error where the process was attached but its Ruby VM
// not found (the error of the attach itself comes as it is): it says what
// the search said.
type VMError struct{ Err error }

func (e *VMError) Error() string { return e.Err.Error() }

// Unwrap returns what the VM's search said.
func (e *VMError) Unwrap() error { return e.Err }

// Open attaches to process pid and finds its Ruby VM. A process that
// exited or was replaced meanwhile is said to have, rather than what its
// VM's search found of what was left of it; else a VM not found is a
// *VMError.
func Open(pid int, opts Options) (*Process, error) {
	t, err := target.Attach(pid)
	if err != nil {
		return nil, err
	}
	t.NoSignalGuard = opts.NoSignalGuard
	vm, err := rubyvm.OpenWith(t, opts.VM)
	if err != nil {
		if same := t.CheckSame(); same != nil {
			err = same
		} else {
			err = &VMError{Err: err}
		}
		t.Close()
		return nil, err
	}
	return &Process{Live: t, VM: vm}, nil
}

// Close releases the VM and the process.
func (p *Process) Close() {
	p.VM.Close()
	p.Live.Close()
}
