package sampler

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRealtimeBudget: the sampling thread stays real-time while its ticks
// take less than half of the time, and goes back to normal scheduling,
// for good, once a second of them took more.
func TestRealtimeBudget(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real-time scheduling needs root here")
	}
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}
	r := enterRealtime(true)
	if !r.on() || policy() != unix.SCHED_FIFO {
		t.Fatalf("enterRealtime(true) as root: on %v, policy %d", r.on(), policy())
	}
	r.window = time.Now().Add(-time.Second)
	r.charge(time.Now().Add(-300 * time.Millisecond))
	if !r.on() || policy() != unix.SCHED_FIFO {
		t.Fatalf("left real time after ticks of 30%% of a second")
	}
	r.window = time.Now().Add(-time.Second)
	r.charge(time.Now().Add(-600 * time.Millisecond))
	if r.on() || policy() != 0 { // SCHED_OTHER
		t.Fatalf("after ticks of 60%% of a second: on %v, policy %d", r.on(), policy())
	}
	if off := enterRealtime(false); off.on() {
		t.Fatal("enterRealtime(false) moved the thread")
	}
}
