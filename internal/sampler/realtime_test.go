package sampler

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRealtimeBudget: the sampling thread stays real-time while it uses
// less than half of a CPU, and goes back to normal scheduling, for good,
// once it used more in a second; its own CPU clock counts.
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
	// A window of a second in which the thread used 30% of a CPU (as
	// its clock is read afterwards), then one of 60%.
	r.window, r.cpuAt = time.Now().Add(-time.Second), r.cpu()-300*time.Millisecond
	r.tick()
	if !r.on() || policy() != unix.SCHED_FIFO {
		t.Fatalf("left real time after ticks of 30%% of a second")
	}
	r.window, r.cpuAt = time.Now().Add(-time.Second), r.cpu()-600*time.Millisecond
	r.tick()
	if r.on() || policy() != 0 { // SCHED_OTHER
		t.Fatalf("after ticks of 60%% of a second: on %v, policy %d", r.on(), policy())
	}
	r = enterRealtime(true)
	c0 := r.cpu()
	for r.cpu()-c0 < 20*time.Millisecond {
	}
	if used := r.cpu() - c0; used < 20*time.Millisecond || used > time.Second {
		t.Errorf("the thread's CPU clock counted %v of a 20 ms spin", used)
	}
	r.leave()
	if off := enterRealtime(false); off.on() {
		t.Fatal("enterRealtime(false) moved the thread")
	}
}
