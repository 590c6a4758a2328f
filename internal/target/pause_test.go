package target

import (
	"os/exec"
	"testing"
)

// TestPauseNeverStopsOtherProcesses: thread IDs handed to WhilePaused may
// come from the target's memory; one that names a thread of another
// process must never be seized or stopped.
func TestPauseNeverStopsOtherProcesses(t *testing.T) {
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	target, other := start(), start()
	l, err := Attach(target.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tracer := func(pid int) string { return procStatus(t, pid, "TracerPid") }
	err = l.WhilePaused([]int{target.Process.Pid, other.Process.Pid, -1, 0}, func(s *Stopped) error {
		if !s.Threads[target.Process.Pid] {
			t.Error("setup: the target's own thread was not stopped")
		}
		if s.Threads[other.Process.Pid] || tracer(other.Process.Pid) != "0" {
			t.Errorf("another process was seized (stopped: %v, TracerPid %s)", s.Threads[other.Process.Pid], tracer(other.Process.Pid))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
