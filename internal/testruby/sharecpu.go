package testruby

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ShareCPU pins process pid's threads and a spinning process to one CPU,
// so that pid is often waiting for it; stop ends the spinner. The spinner
// is a process of its own, not a thread of the test: the sampler moves
// every thread of the process it runs in off its target's CPUs (ownCPUs),
// and a spinning thread of the test moved with them would leave the
// target a CPU to itself.
func ShareCPU(t *testing.T, pid int) (stop func()) {
	t.Helper()
	// One CPU this test may use (a container's cpuset need not have CPU 0).
	var mine, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	for cpu := 0; cpu < 1024; cpu++ {
		if mine.IsSet(cpu) {
			set.Set(cpu)
			break
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				t.Fatalf("pin tid %d: %v", tid, err)
			}
		}
	}
	spinner := spinnerCmd()
	if err := spinner.Start(); err != nil {
		t.Fatalf("start a spinner: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = spinner.Process.Kill()
			_ = spinner.Wait()
		})
	}
	t.Cleanup(stop) // a test that fails early must not leave a core spinning
	if err := unix.SchedSetaffinity(spinner.Process.Pid, &set); err != nil {
		t.Fatalf("pin the spinner: %v", err)
	}
	return stop
}

// Spinners starts n processes that spin on a CPU each, wherever the
// kernel puts them, until the test ends: a busy machine, whose every CPU
// a process being profiled shares with others.
func Spinners(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := spinnerCmd()
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a spinner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// spinnerCmd is a process that spins on a CPU until killed, or until the
// test binary that started it dies: a test killed by its timeout, or a
// run interrupted, runs no cleanup, and its spinners went on for an hour
// and more, skewing what ran after them.
func spinnerCmd() *exec.Cmd {
	return DieWithTest(exec.Command("sh", "-c", "while :; do :; done"))
}

// DieWithTest makes cmd's process die with the test binary that starts it
// (PR_SET_PDEATHSIG): a process that keeps a CPU busy, left behind by a
// test killed by its timeout or an interrupted run, would load every test
// after it.
func DieWithTest(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}

// NoSuchPID is a PID no process can have (above the kernel's pid_max), for
// tests that hand the crash handler a crash whose process is gone: a PID
// freed by an exited process could be reused by another meanwhile.
func NoSuchPID() int {
	max := 4194304 // PID_MAX_LIMIT on 64-bit
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		var n int
		if _, err := fmt.Sscan(string(b), &n); err == nil {
			max = n
		}
	}
	return max + 1
}
