// Package testvm opens the Ruby VM of a live test process. It stands apart
// from testruby because internal/target's own tests use testruby, and
// rubyvm imports target.
package testvm

import (
	"errors"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/corefile"
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

// AttachAsleep attaches to pid, opens its Ruby VM and reads every thread
// of it, pausing the process for each read when pause is set. The program
// writes its report just before its main thread calls sleep, and that
// thread may still be on its way there (in File.rename, or waiting for the
// GVL that a running thread holds): the read is repeated, up to a
// deadline, until the main thread's innermost frame is Kernel#sleep, and
// the last read is returned either way.
func AttachAsleep(t testing.TB, pid int, pause bool) (*rubyvm.VM, []rubyvm.Thread) {
	t.Helper()
	_, vm := Attach(t, pid)
	return vm, ReadAsleep(t, vm, pause)
}

// ReadAsleep reads vm's threads as AttachAsleep does.
func ReadAsleep(t testing.TB, vm *rubyvm.VM, pause bool) []rubyvm.Thread {
	t.Helper()
	read := func() []rubyvm.Thread {
		var ths []rubyvm.Thread
		read := func() (err error) {
			ths, err = vm.Threads()
			return err
		}
		var err error
		if pause {
			err = Paused(t, vm, read)
		} else {
			err = read()
		}
		if err != nil {
			t.Fatal(err)
		}
		return ths
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ths := read()
		for _, th := range ths {
			if th.Main && len(th.Frames) > 0 && th.Frames[0].Label == "Kernel#sleep" {
				return ths
			}
		}
		if time.Now().After(deadline) {
			return ths
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// OpenArm64Core opens a qemu-made aarch64 core with the files of the
// sysroot, and its Ruby VM, which must be read through the built-in table
// (Debian's arm64 libruby is stripped); both are closed when the test
// ends.
func OpenArm64Core(t testing.TB, sysroot, core string) (*target.Core, *rubyvm.VM) {
	t.Helper()
	c, err := corefile.Open(core, target.CoreOptions{Sysroot: sysroot}, rubyvm.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if c.Core.Arch() != arch.ARM64 {
		t.Fatalf("core of %s, want aarch64", c.Core.Arch().Name)
	}
	if c.VM.Layout.Source != "table" {
		t.Errorf("Debian's stripped arm64 libruby read with layout from %s, want the built-in table", c.VM.Layout.Source)
	}
	return c.Core, c.VM
}
