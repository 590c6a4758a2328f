package realtime

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEnterLeave: Enter moves the calling thread to SCHED_FIFO with reset
// on fork, Leave puts back the policy and nice it had.
func TestEnterLeave(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real-time scheduling needs root here")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	th, err := Enter()
	if err != nil {
		t.Fatal(err)
	}
	in, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in.Policy != unix.SCHED_FIFO || in.Priority != 1 || in.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 {
		t.Errorf("after Enter: policy %d priority %d flags %#x, want SCHED_FIFO 1 with reset on fork", in.Policy, in.Priority, in.Flags)
	}
	if err := th.Leave(); err != nil {
		t.Fatal(err)
	}
	after, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Policy != before.Policy || after.Nice != before.Nice || after.Priority != before.Priority {
		t.Errorf("after Leave: %+v, before Enter: %+v", *after, *before)
	}
}
