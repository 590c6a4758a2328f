package procfs

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/testruby"
)

type churnReport struct {
	PID     int `json:"pid"`
	Threads []struct {
		Name string `json:"name"`
		TID  int    `json:"tid"`
	} `json:"threads"`
}

// watchChurn starts testdata/thread_churn.rb with env and returns its
// report (its threads' own ids) and a TaskStates on it.
func watchChurn(t *testing.T, env []string) (*testruby.Process, churnReport, *TaskStates) {
	t.Helper()
	p := testruby.Start(t, testruby.Rubies(t)[0], "thread_churn.rb", env)
	var rep churnReport
	p.WaitReport(t, &rep, 30*time.Second)
	tt := NewTaskStates(p.PID())
	t.Cleanup(tt.Close)
	return p, rep, tt
}

// TestTaskStatesRunning: the threads a Ruby program reports (its own
// Thread#native_thread_id) are all listed; the one spinning is running in
// most reads and the ones asleep never are.
func TestTaskStatesRunning(t *testing.T) {
	_, rep, tt := watchChurn(t, nil)
	tids := map[string]int{}
	for _, th := range rep.Threads {
		tids[th.Name] = th.TID
	}
	spinning := 0
	const reads = 50
	for i := 0; i < reads; i++ {
		running, all, err := tt.Read()
		if err != nil {
			t.Fatal(err)
		}
		for name, tid := range tids {
			if !all[tid] {
				t.Fatalf("read %d: thread %q (tid %d) not listed: %v", i, name, tid, all)
			}
		}
		if running[tids["cpu"]] {
			spinning++
		}
		for _, name := range []string{"napper", "waiter"} {
			if running[tids[name]] {
				t.Errorf("read %d: thread %q, asleep, reported running", i, name)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if spinning < reads/2 {
		t.Errorf("the spinning thread was running in %d of %d reads", spinning, reads)
	}
}

// TestTaskStatesFollowsThreads: threads born and ended between reads are
// listed while they live and dropped (their files closed) once gone.
func TestTaskStatesFollowsThreads(t *testing.T) {
	p, _, tt := watchChurn(t, []string{"BLIP_MS=10"})
	seen := map[int]bool{}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		_, all, err := tt.Read()
		if err != nil {
			t.Fatal(err)
		}
		for tid := range all {
			seen[tid] = true
		}
		for tid := range tt.stats {
			if !all[tid] {
				t.Fatalf("tid %d is gone but its stat file is still open", tid)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	_, all, err := tt.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(tt.stats) > len(all) {
		t.Errorf("%d stat files open for %d threads", len(tt.stats), len(all))
	}
	// Each blip lives 20 ms and the reads come every few: all but the
	// last, which may still be running, must have been seen.
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
}

// TestTaskStatesOutOfFiles: when rbscope runs out of file descriptors the
// table gives back the ones it kept and still reads every thread.
func TestTaskStatesOutOfFiles(t *testing.T) {
	_, rep, tt := watchChurn(t, nil)
	if _, _, err := tt.Read(); err != nil {
		t.Fatal(err)
	}
	if len(tt.stats) < 3 {
		t.Fatalf("%d stat files kept for %d threads", len(tt.stats), len(rep.Threads))
	}
	// Use up every descriptor below the limit, then read again.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	var hogs []int
	defer func() {
		for _, fd := range hogs {
			unix.Close(fd)
		}
	}()
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		hogs = append(hogs, fd)
	}
	// A thread not yet kept needs a file now: forget one.
	for tid, fd := range tt.stats {
		unix.Close(fd)
		delete(tt.stats, tid)
		break
	}
	hogs = append(hogs, mustOpen(t)) // the one just freed
	running, all, err := tt.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range rep.Threads {
		if !all[th.TID] {
			t.Errorf("thread %q (tid %d) not listed", th.Name, th.TID)
		}
	}
	if !tt.noKeep || len(tt.stats) != 0 {
		t.Errorf("out of files: noKeep %v, %d files kept", tt.noKeep, len(tt.stats))
	}
	cpu := 0
	for _, th := range rep.Threads {
		if th.Name == "cpu" {
			cpu = th.TID
		}
	}
	// The spinning thread is seen running within a few reads.
	for i := 0; i < 50 && !running[cpu]; i++ {
		if running, _, err = tt.Read(); err != nil {
			t.Fatal(err)
		}
	}
	if !running[cpu] {
		t.Errorf("the spinning thread (tid %d) never read as running", cpu)
	}
}

func mustOpen(t *testing.T) int {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestTaskStatesLastCPU: a thread of this test, pinned to one CPU and
// spinning there, is on that CPU as LastCPU reads it.
func TestTaskStatesLastCPU(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	want := -1
	for cpu := 0; cpu < 1024; cpu++ {
		if mine.IsSet(cpu) {
			want = cpu // the last one this test may use
		}
	}
	var stop atomic.Bool
	defer stop.Store(true)
	tids := make(chan int)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine
		var one unix.CPUSet
		one.Set(want)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Errorf("pin: %v", err)
		}
		tids <- unix.Gettid()
		for !stop.Load() {
		}
	}()
	tid := <-tids
	ts := NewTaskStates(os.Getpid())
	defer ts.Close()
	if cpu, ok := ts.LastCPU(tid); !ok || cpu != want {
		t.Errorf("LastCPU(%d) = %d, %v; the thread is pinned to CPU %d", tid, cpu, ok, want)
	}
	if _, ok := ts.LastCPU(1 << 30); ok {
		t.Errorf("LastCPU of no thread succeeded")
	}
}

// TestRunDelay: a thread of this test made to wait for its CPU (pinned
// beside a spinning thread) has its run delay grow.
func TestRunDelay(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	var one unix.CPUSet
	for cpu := 0; cpu < 1024; cpu++ {
		if mine.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	var stop atomic.Bool
	defer stop.Store(true)
	tids := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			runtime.LockOSThread() // the thread ends with the goroutine
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				t.Errorf("pin: %v", err)
			}
			tids <- unix.Gettid()
			for !stop.Load() {
			}
		}()
	}
	tid := <-tids
	<-tids
	before, ok := RunDelay(os.Getpid(), tid)
	if !ok {
		t.Skip("no schedstat here")
	}
	time.Sleep(200 * time.Millisecond)
	after, _ := RunDelay(os.Getpid(), tid)
	if after-before < 10*time.Millisecond {
		t.Errorf("a thread sharing its CPU with a spinner for 200ms waited %v for it", after-before)
	}
	if _, ok := RunDelay(os.Getpid(), 1<<30); ok {
		t.Errorf("RunDelay of no thread succeeded")
	}
}

// TestTaskStatesReadAllocatesNothing: once its files are open, a read of
// a process's thread states (what every sampler tick does) allocates
// nothing.
func TestTaskStatesReadAllocatesNothing(t *testing.T) {
	_, rep, tt := watchChurn(t, nil)
	if _, _, err := tt.Read(); err != nil {
		t.Fatal(err)
	}
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		_, all, err := tt.Read()
		if err != nil {
			t.Fatal(err)
		}
		n = len(all)
	})
	if n < len(rep.Threads) {
		t.Fatalf("setup: %d threads listed, the program has %d", n, len(rep.Threads))
	}
	// A thread born during the reads opens its stat file: allow for one.
	if allocs > 1 {
		t.Errorf("a read of %d threads' states allocates %.1f times", n, allocs)
	}
}

// TestTaskStatesGone: a process that has exited reads as ErrGone, a
// zombie not yet reaped as well as one reaped.
func TestTaskStatesGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tt := NewTaskStates(cmd.Process.Pid)
	defer tt.Close()
	if _, _, err := tt.Read(); err != nil {
		t.Fatalf("a sleeping process: %v", err)
	}
	cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, err := tt.Read()
		if errors.Is(err, ErrGone) {
			break // a zombie: its parent has not waited yet
		}
		if time.Now().After(deadline) {
			t.Fatalf("a killed, unreaped process reads as %v, want ErrGone", err)
		}
	}
	cmd.Wait()
	if _, _, err := tt.Read(); !errors.Is(err, ErrGone) {
		t.Errorf("a reaped process reads as %v, want ErrGone", err)
	}
	if _, _, err := NewTaskStates(cmd.Process.Pid).Read(); !errors.Is(err, ErrGone) {
		t.Errorf("a reaped process, read anew, reads as %v, want ErrGone", err)
	}
}

// TestTaskStatesSeesASleeperWake: a Ruby thread that slept through many
// reads (read through its schedstat alone, see stillAsleep) and then runs
// without end is running in every read once it has begun: its stat line is
// read again as soon as it has had a turn on a CPU, and at every read while
// it is runnable.
func TestTaskStatesSeesASleeperWake(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	if testruby.Older(rb, 3, 1) {
		t.Skip("Thread#native_thread_id needs Ruby 3.1")
	}
	p := testruby.Start(t, rb, "wake_spin.rb", nil)
	var rep struct {
		PID int `json:"pid"`
		TID int `json:"tid"`
	}
	p.WaitReport(t, &rep, 30*time.Second)
	tt := NewTaskStates(rep.PID)
	defer tt.Close()
	for i := 0; i < 200; i++ {
		running, all, err := tt.Read()
		if err != nil {
			t.Fatal(err)
		}
		if !all[rep.TID] {
			t.Fatalf("read %d: tid %d not listed", i, rep.TID)
		}
		if running[rep.TID] {
			t.Fatalf("read %d: the thread stopped in Thread.stop reported running", i)
		}
	}
	if m := tt.sched[rep.TID]; m == nil || m.fd < 0 || !m.known {
		t.Logf("no schedstat for tid %d: every read takes the stat line", rep.TID)
	}
	if err := unix.Kill(rep.PID, unix.SIGUSR1); err != nil {
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
	// Back to back, most reads fall between two of the kernel's updates
	// of the thread's run time: only its state says it runs.
	for i := 0; i < 2000; i++ {
		running, _, err := tt.Read()
		if err != nil {
			t.Fatal(err)
		}
		if !running[rep.TID] {
			t.Fatalf("read %d after the thread began to spin: not reported runnable", i)
		}
	}
}
