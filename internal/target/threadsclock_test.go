package target

import (
	"bufio"
	"os/exec"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestThreadsClock: the clock of a process's threads stands still while
// they all sleep, and counts the time of a thread born after it was opened
// (inherited), as the kernel's own count of the process's time says.
func TestThreadsClock(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := testruby.DieWithTest(exec.Command(rb.Bin, "-e", `$stdout.sync = true; puts "ready"; $stdin.gets; Thread.new { x = 0; loop { x += 1 } }; sleep`))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tids, err := l.Threads()
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.ThreadsClock(tids)
	if err != nil {
		testruby.Missing(t, "perf task clocks not allowed here: %v", err)
	}
	defer c.Close()
	each := make([]uint64, len(c.TIDs()))
	read := func() (uint64, error) { return c.ReadEach(each) }

	// Asleep, every thread: the clock stands still (Ruby's timer thread
	// may wake now and then: some readings in a row must be equal).
	still := false
	for i := 0; i < 50 && !still; i++ {
		a, err := read()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		b, _ := read()
		still = a == b
	}
	if !still {
		t.Error("the clock of a process asleep never stood still for 5 ms")
	}

	// A thread born now spins: the clock counts its time.
	before, _ := read()
	st0, _ := procfs.ReadStat(pid, 0)
	stolen0 := hostSteal(t)
	in.Write([]byte("go\n"))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := procfs.ReadStat(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.UTime+st.STime-st0.UTime-st0.STime >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("setup: the spinning thread got no CPU in 60 s")
		}
	}
	after, _ := read()
	st1, _ := procfs.ReadStat(pid, 0)
	stolen := (hostSteal(t) - stolen0).Seconds() * procfs.ClockTick
	ticks := float64(st1.UTime + st1.STime - st0.UTime - st0.STime)
	counted := float64(after-before) / 1e7 // 10 ms clock ticks
	// The task clock runs on the CPU's clock while the thread is on it;
	// the kernel's count (with paravirtual time accounting) leaves out
	// what the hypervisor stole meanwhile. On a shared host that is
	// several ticks: the host's own count of it, on all CPUs, bounds the
	// difference.
	if counted < ticks-3 || counted > ticks+3+stolen {
		t.Errorf("the clock counted %.1f ticks of the process's threads, the kernel %.0f (the hypervisor stole %.0f from the host)", counted, ticks, stolen)
	}
}

// hostSteal is procfs.HostSteal, or the test's end.
func hostSteal(t *testing.T) time.Duration {
	t.Helper()
	d, err := procfs.HostSteal()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
