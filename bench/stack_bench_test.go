package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testvm"
)

// depth is how deep the workload's main thread recurses in bench_deep, as
// in bench/stack.sh.
const depth = 200

// workload is the Ruby process of testdata/bench_deep.rb, shared by every
// benchmark in the package and started on first use.
var workload struct {
	once sync.Once
	cmd  *exec.Cmd
	dir  string
	pid  int
	skip string // why the benchmarks skip (no Ruby)
	err  error
}

// cleanups run when the benchmarks are done (other workloads stop there).
var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	if workload.cmd != nil {
		_ = workload.cmd.Process.Kill()
		_ = workload.cmd.Wait()
	}
	if workload.dir != "" {
		os.RemoveAll(workload.dir)
	}
	os.Exit(code)
}

func findRuby() string {
	if r := os.Getenv("RUBY"); r != "" {
		return r
	}
	if _, err := os.Stat("/usr/bin/ruby"); err == nil {
		return "/usr/bin/ruby"
	}
	r, _ := exec.LookPath("ruby")
	return r
}

func startWorkload() {
	rb := findRuby()
	if rb == "" {
		workload.skip = "no Ruby installed (apt-get install ruby)"
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "testdata", "bench_deep.rb")
	dir, err := os.MkdirTemp("", "rbscope-bench")
	if err != nil {
		workload.err = err
		return
	}
	workload.dir = dir
	ready := filepath.Join(dir, "ready.json")
	var out strings.Builder
	cmd := exec.Command(rb, script, ready, fmt.Sprint(depth), "sleep")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the OS thread that forked the child ends, and
	// target.Live ends its locked tracer threads on Close, which may be
	// the forking one: start the child from a thread that never ends.
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		started <- cmd.Start()
		select {}
	}()
	if err := <-started; err != nil {
		workload.err = fmt.Errorf("start %s: %w", rb, err)
		return
	}
	// Never Wait for the process before the end: this process is both its
	// parent and its tracer, and a wait would take the ptrace stops that
	// Pause waits for.
	workload.cmd = cmd
	workload.pid = cmd.Process.Pid
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var doc struct {
				PID int `json:"pid"`
			}
			if err := json.Unmarshal(b, &doc); err != nil || doc.PID != workload.pid {
				workload.err = fmt.Errorf("bad ready file %s: %q", ready, b)
			}
			return
		}
		if procfs.Exited(workload.pid) {
			workload.err = fmt.Errorf("%s exited before it was ready: %s", script, out.String())
			return
		}
		if time.Now().After(deadline) {
			workload.err = fmt.Errorf("%s not ready within 15 s: %s", script, out.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid returns the workload's PID, skipping the benchmark without Ruby.
func pid(b *testing.B) int {
	b.Helper()
	workload.once.Do(startWorkload)
	if workload.skip != "" {
		b.Skip(workload.skip)
	}
	if workload.err != nil {
		b.Fatal(workload.err)
	}
	return workload.pid
}

// check counts the frames read and makes sure the main thread holds all
// depth bench_deep frames, so an error cannot pass for a fast read.
func check(b *testing.B, threads []rubyvm.Thread) int {
	b.Helper()
	frames, deep := 0, 0
	for _, th := range threads {
		frames += len(th.Frames)
		if th.Error != "" {
			b.Fatalf("thread %d: %s", th.TID, th.Error)
		}
		if !th.Main {
			continue
		}
		for _, f := range th.Frames {
			if f.BaseLabel == "bench_deep" {
				deep++
			}
		}
	}
	if len(threads) != 4 || deep != depth {
		b.Fatalf("read %d threads (want 4) with %d bench_deep frames on main (want %d)", len(threads), deep, depth)
	}
	return frames
}

func read(b *testing.B, t *target.Live, vm *rubyvm.VM, pause bool) []rubyvm.Thread {
	b.Helper()
	var threads []rubyvm.Thread
	readThreads := func() (err error) {
		threads, err = vm.Threads()
		return err
	}
	var err error
	if pause {
		err = t.WhilePaused(nil, func(*target.Stopped) error { return readThreads() })
	} else {
		err = readThreads()
	}
	if err != nil {
		b.Fatal(err)
	}
	return threads
}

func report(b *testing.B, frames int) {
	b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(frames)/s, "frames/s")
	}
}

// benchStack times what `rbscope stack` does per call, printing aside:
// attach, find the VM and its layout (rubyvm.Open), pause, walk every
// thread, resume, close.
func benchStack(b *testing.B, pause bool) {
	p := pid(b)
	frames := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := target.Attach(p)
		if err != nil {
			b.Fatal(err)
		}
		vm, err := rubyvm.Open(t)
		if err != nil {
			b.Fatal(err)
		}
		frames += check(b, read(b, t, vm, pause))
		vm.Close()
		t.Close()
	}
	b.StopTimer()
	report(b, frames)
}

// benchThreads times the walk alone, on a VM opened once (its caches of
// iseqs, IDs and class names warm after the first op).
func benchThreads(b *testing.B, pause bool) {
	t, vm := testvm.Attach(b, pid(b))
	frames := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		frames += check(b, read(b, t, vm, pause))
	}
	b.StopTimer()
	report(b, frames)
}

func BenchmarkStack(b *testing.B)              { benchStack(b, true) }
func BenchmarkStackNonblocking(b *testing.B)   { benchStack(b, false) }
func BenchmarkThreadsPaused(b *testing.B)      { benchThreads(b, true) }
func BenchmarkThreadsNonblocking(b *testing.B) { benchThreads(b, false) }

// BenchmarkNativeUnwind measures, side by side in one run, a paused read
// of every thread's Ruby stack alone and the same read plus every thread's
// native unwind (stacks.Reader, as a profiler's ticks read: warm CFI and
// symbol caches after the first). It reports the native read's own time
// per thread (its registers and unwind; goal: under 50 µs), the native
// frames per thread, and the ratio of the two reads.
func BenchmarkNativeUnwind(b *testing.B) {
	t, vm := testvm.Attach(b, pid(b))
	ruby := stacks.NewReader(t, vm, stacks.ReaderOptions{})
	native := stacks.NewReader(t, vm, stacks.ReaderOptions{Native: true})
	defer native.Close()
	var rubyOnly, withNative time.Duration
	unwound, nativeFrames := 0, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := native.Prepare(); err != nil {
			b.Fatal(err)
		}
		s0 := time.Now()
		read, err := ruby.Read(&stacks.Selection{})
		if err != nil {
			b.Fatal(err)
		}
		check(b, read.Threads)
		s1 := time.Now()
		read, err = native.Read(&stacks.Selection{AllNative: true})
		if err != nil {
			b.Fatal(err)
		}
		withNative += time.Since(s1)
		rubyOnly += s1.Sub(s0)
		check(b, read.Threads)
		for _, tid := range read.Stopped {
			frames, _, _ := native.Native(tid)
			unwound++
			nativeFrames += len(frames)
		}
	}
	b.StopTimer()
	unwinding := withNative - rubyOnly
	if unwound > 0 && rubyOnly > 0 {
		b.ReportMetric(float64(unwinding.Microseconds())/float64(unwound), "native-us/thread")
		b.ReportMetric(float64(nativeFrames)/float64(unwound), "native-frames/thread")
		b.ReportMetric(withNative.Seconds()/rubyOnly.Seconds(), "native/ruby-only")
	}
}
