package target

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
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
// A watch of a thread that ends says so.
func TestSwitchWatch(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", `$stdout.sync = true
t = Thread.new { Thread.current.name = "watched"; $stdin.gets }
sleep 0.01 until t.status == "sleep"
puts "ready"; t.join; puts "joined"; $stdin.gets; x = 0; loop { x += 1 }`)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewReader(out)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	l, err := Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The thread named "watched" (its name is its comm) ends once it has
	// read a line.
	tids, err := l.Threads()
	if err != nil {
		t.Fatal(err)
	}
	watched := 0
	for _, tid := range tids {
		if st, err := procfs.ReadStat(pid, tid); err == nil && st.Comm == "watched" {
			watched = tid
		}
	}
	if watched == 0 {
		t.Fatalf("setup: no thread named watched among %v", tids)
	}
	tw, err := l.WatchSwitches(watched)
	if err != nil {
		testruby.Missing(t, "perf switch events not allowed here: %v", err)
	}
	defer tw.Close()
	in.Write([]byte("end\n"))
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// Joined, a Ruby thread may not have ended yet: its TID goes.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, watched)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("setup: the joined thread has not ended after 60 s")
		}
	}
	if state, _, _ := tw.Last(); state != ThreadExited {
		t.Errorf("a thread joined: state %d, want %d (exited)", state, ThreadExited)
	}

	w, err := l.WatchSwitches(pid)
	if err != nil {
		t.Fatal(err)
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

	// A thread's state in /proc changes before it leaves its CPU (it sets
	// it, then calls the scheduler), so a reading right after the change
	// may still find the thread on its CPU: each check below waits, for a
	// while, for the record it expects.
	settle := func(ok func(SwitchState, uint64) bool) (SwitchState, int, uint64) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			state, cpu, seq := w.Last()
			if ok(state, seq) || time.Now().After(deadline) {
				return state, cpu, seq
			}
		}
	}

	waitState(func(s byte) bool { return s == 'S' }, "asleep")
	state, _, seq0 := settle(func(s SwitchState, _ uint64) bool { return s == SwitchNone || s == SwitchedOut })
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
	state, _, seq2 := settle(func(s SwitchState, seq uint64) bool { return s == SwitchedOut && seq != seq1 })
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

// switchSeqs is a procfs.SwitchSeq from watches of l's threads, opened on
// first need; a watch of a thread that has exited is closed. close closes
// the watches.
func switchSeqs(l *Live) (seq procfs.SwitchSeq, close func()) {
	watches := map[int]*SwitchWatch{}
	seq = func(tid int) (uint64, bool) {
		w := watches[tid]
		if w == nil {
			var err error
			if w, err = l.WatchSwitches(tid); err != nil {
				return 0, false
			}
			watches[tid] = w
		}
		state, _, s := w.Last()
		if state == ThreadExited {
			w.Close()
			delete(watches, tid)
			return 0, false
		}
		return s, true
	}
	return seq, func() {
		for _, w := range watches {
			w.Close()
		}
	}
}

// TestTaskStatesWithSwitches: thread states read with switch watches
// (procfs.TaskStates.UseSwitches), which skip the stat lines of threads
// not switched since their last one, say what the program does: a thread
// asleep is never running, and once woken to spin it is running in every
// read; threads born and ended between reads (testdata/thread_churn.rb's
// blips, by their own native ids) are listed, and none is listed once its
// TID has gone.
func TestTaskStatesWithSwitches(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	if testruby.Older(rb, 3, 1) {
		t.Skip("Thread#native_thread_id needs Ruby 3.1")
	}
	t.Run("wake", func(t *testing.T) {
		p := testruby.Start(t, rb, "wake_spin.rb", nil)
		var rep struct {
			PID int `json:"pid"`
			TID int `json:"tid"`
		}
		p.WaitReport(t, &rep, 30*time.Second)
		l, err := Attach(rep.PID)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		seq, closeWatches := switchSeqs(l)
		defer closeWatches()
		if _, ok := seq(rep.TID); !ok {
			testruby.Missing(t, "perf switch events not allowed here")
		}
		tt := procfs.NewTaskStates(rep.PID)
		defer tt.Close()
		tt.UseSwitches(seq)
		for i := 0; i < 200; i++ {
			running, all, err := tt.Read()
			if err != nil {
				t.Fatal(err)
			}
			if !all[rep.TID] {
				t.Fatalf("read %d: tid %d not listed", i, rep.TID)
			}
			if running[rep.TID] {
				t.Fatalf("read %d: the thread blocked in a read reported running", i)
			}
		}
		if err := syscall.Kill(rep.PID, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, err := os.Stat(p.Report + ".spinning"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the thread never began to spin")
			}
		}
		for i := 0; i < 2000; i++ {
			running, _, err := tt.Read()
			if err != nil {
				t.Fatal(err)
			}
			if !running[rep.TID] {
				t.Fatalf("read %d after the thread began to spin: not reported runnable", i)
			}
		}
	})
	t.Run("churn", func(t *testing.T) {
		p := testruby.Start(t, rb, "thread_churn.rb", []string{"BLIP_MS=10"})
		var rep struct {
			PID int `json:"pid"`
		}
		p.WaitReport(t, &rep, 30*time.Second)
		l, err := Attach(rep.PID)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		seq, closeWatches := switchSeqs(l)
		defer closeWatches()
		tt := procfs.NewTaskStates(rep.PID)
		defer tt.Close()
		tt.UseSwitches(seq)
		seen := map[int]bool{}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			_, all, err := tt.Read()
			if err != nil {
				t.Fatal(err)
			}
			for tid := range all {
				seen[tid] = true
				if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", rep.PID, tid)); err != nil {
					// Listed, then gone: the next read must drop it.
					if _, again, err := tt.Read(); err == nil && again[tid] {
						if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", rep.PID, tid)); err != nil {
							t.Fatalf("tid %d has ended and is still listed", tid)
						}
					}
				}
			}
		}
		f, err := os.Open(p.Report + ".blips")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var blips []int
		for sc := bufio.NewScanner(f); sc.Scan(); {
			var b struct {
				TID int `json:"tid"`
			}
			if json.Unmarshal(sc.Bytes(), &b) == nil {
				blips = append(blips, b.TID)
			}
		}
		if len(blips) < 10 {
			t.Fatalf("only %d blip threads in a second", len(blips))
		}
		missed := 0
		for _, tid := range blips[1 : len(blips)-1] {
			if !seen[tid] {
				missed++
			}
		}
		// A busy machine may keep the reader off the CPU past a blip's life.
		if missed > len(blips)/5 {
			t.Errorf("%d of %d blip threads never listed", missed, len(blips)-2)
		}
	})
}
