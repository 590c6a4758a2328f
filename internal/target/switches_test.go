package target

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestSwitchWatch: a watch of the main thread of a Ruby program says what
// the kernel says of the thread: blocked reading its stdin, it has not
// been switched (or left its CPU again); spinning, it is on a CPU or was
// preempted; stopped (SIGSTOP), it left its CPU; spinning again once
// continued, it is back on one; and every switch moves the sequence on.
func TestSwitchWatch(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", `$stdout.sync = true; puts "ready"; $stdin.gets; x = 0; loop { x += 1 }`)
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
	w, err := l.WatchSwitches(pid)
	if err != nil {
		testruby.Missing(t, "perf switch events not allowed here: %v", err)
	}
	defer w.Close()
	waitState := func(want func(byte) bool, what string) {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st, err := procfs.ReadStat(pid, pid)
			if err != nil {
				t.Fatal(err)
			}
			if want(st.State) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("setup: the main thread is not %s after 60 s (state %c)", what, st.State)
			}
		}
	}
	waitSpin := func() {
		st0, _ := procfs.ReadStat(pid, pid)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st, err := procfs.ReadStat(pid, pid)
			if err != nil {
				t.Fatal(err)
			}
			if st.UTime+st.STime >= st0.UTime+st0.STime+3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("setup: the spinning thread got no CPU in 60 s")
			}
		}
	}

	waitState(func(s byte) bool { return s == 'S' }, "asleep")
	state, _, seq0 := w.Last()
	if state != SwitchNone && state != SwitchedOut {
		t.Errorf("blocked in a read: state %d, want %d (not switched) or %d (left its CPU)", state, SwitchNone, SwitchedOut)
	}

	in.Write([]byte("go\n"))
	waitSpin()
	state, cpu, seq1 := w.Last()
	if state != SwitchedIn && state != SwitchedOutPreempted {
		t.Errorf("spinning: state %d, want %d (on a CPU) or %d (preempted)", state, SwitchedIn, SwitchedOutPreempted)
	}
	if seq1 == seq0 || cpu < 0 {
		t.Errorf("spinning: sequence %d (before %d), CPU %d: the wake-up was not recorded", seq1, seq0, cpu)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(func(s byte) bool { return s == 'T' }, "stopped")
	state, _, seq2 := w.Last()
	if state != SwitchedOut || seq2 == seq1 {
		t.Errorf("stopped: state %d, sequence %d (before %d); want %d (left its CPU), a new sequence", state, seq2, seq1, SwitchedOut)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitSpin()
	state, _, seq3 := w.Last()
	if (state != SwitchedIn && state != SwitchedOutPreempted) || seq3 == seq2 {
		t.Errorf("continued: state %d, sequence %d (before %d); want %d or %d, a new sequence", state, seq3, seq2, SwitchedIn, SwitchedOutPreempted)
	}
}
