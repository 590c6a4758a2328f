package target

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestKilledWhilePausedGoesBackToItsParent: a process killed while its
// threads stand still (a server's worker killed mid-recording) must reach
// its own parent as any dead child does, while rbscope stays attached,
// so that the parent (a server's master) sees it end and forks another.
func TestKilledWhilePausedGoesBackToItsParent(t *testing.T) {
	// The shell is the test's child, and the sleep the shell's: the
	// shell says the sleep's pid, waits for it and then exits.
	sh := exec.Command("sh", "-c", `sleep 60 & echo $!; wait $!; echo done`)
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	// The shell says the pid as soon as it has forked: attach once the
	// child is the sleep, or rbscope rightly sees the exec as a new process.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: pid %d never became sleep", pid)
		}
	}
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = l.WhilePaused(nil, func(s *Stopped) error {
		return syscall.Kill(pid, syscall.SIGKILL)
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() { s, _ := r.ReadString('\n'); done <- s }()
	select {
	case s := <-done:
		if strings.TrimSpace(s) != "done" {
			t.Errorf("the shell said %q", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parent never saw its child killed while paused end (rbscope still attached)")
	}
}

// TestHoldsStoppedOnlyWhilePaused: the owner of rbscope's signals must
// exit at once on SIGINT only while a target stands still in a session
// that does not end on the signal by itself (NoSignalGuard), and a panic
// in the session leaves none held.
func TestHoldsStoppedOnlyWhilePaused(t *testing.T) {
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	l, err := Attach(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if HoldsStopped() {
		t.Fatal("a target held before any pause")
	}
	var during bool
	if err := l.WhilePaused(nil, func(*Stopped) error { during = HoldsStopped(); return nil }); err != nil {
		t.Fatal(err)
	}
	if !during || HoldsStopped() {
		t.Errorf("held during the pause %v (want true), after it %v (want false)", during, HoldsStopped())
	}
	l.NoSignalGuard = true
	l.WhilePaused(nil, func(*Stopped) error { during = HoldsStopped(); return nil })
	if during {
		t.Error("a session with NoSignalGuard makes rbscope exit on a signal")
	}
	l.NoSignalGuard = false
	if err := l.WhilePaused(nil, func(*Stopped) error { panic("in the session") }); err == nil {
		t.Error("a panic in the session was not returned as an error")
	}
	if HoldsStopped() {
		t.Error("a target still held after a session that panicked")
	}
	if st := procStatus(t, c.Process.Pid, "State"); strings.HasPrefix(st, "t") {
		t.Errorf("target left stopped after a panic: %s", st)
	}
}
