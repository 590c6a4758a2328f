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
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testvm"
)

// heapExtra is how many objects testdata/heap_census.rb adds to its ~90k
// for the census benchmark: well over a million live objects in all.
const heapExtra = 1_200_000

// rubyWorkload is a Ruby program of testdata/ started on first use, which
// writes a JSON report (with its "pid") to the path of its first argument
// when ready; TestMain's cleanups kill it.
type rubyWorkload struct {
	once   sync.Once
	cmd    *exec.Cmd
	dir    string
	pid    int
	report []byte // the report it wrote
	skip   string
	err    error
}

// heapWorkload is testdata/heap_census.rb with a large heap.
var heapWorkload = newRubyWorkload()

// newRubyWorkload returns a workload that is killed (and its directory
// removed) when the benchmarks are done.
func newRubyWorkload() *rubyWorkload {
	w := &rubyWorkload{}
	cleanups = append(cleanups, func() {
		if w.cmd != nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
		if w.dir != "" {
			os.RemoveAll(w.dir)
		}
	})
	return w
}

// start runs ruby testdata/SCRIPT REPORT args(dir)... in a fresh directory
// and waits up to timeout for its report.
func (w *rubyWorkload) start(script string, args func(dir string) []string, timeout time.Duration) {
	rb := findRuby()
	if rb == "" {
		w.skip = "no Ruby installed (apt-get install ruby)"
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script = filepath.Join(filepath.Dir(file), "..", "testdata", script)
	dir, err := os.MkdirTemp("", "rbscope-bench-heap")
	if err != nil {
		w.err = err
		return
	}
	w.dir = dir
	ready := filepath.Join(dir, "report.json")
	var out strings.Builder
	cmd := exec.Command(rb, append([]string{script, ready}, args(dir)...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error)
	go func() { // see startWorkload: the forking thread must never end
		runtime.LockOSThread()
		started <- cmd.Start()
		select {}
	}()
	if err := <-started; err != nil {
		w.err = fmt.Errorf("start %s: %w", rb, err)
		return
	}
	w.cmd = cmd
	w.pid = cmd.Process.Pid
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var doc struct {
				PID int `json:"pid"`
			}
			if err := json.Unmarshal(b, &doc); err != nil || doc.PID != w.pid {
				w.err = fmt.Errorf("bad report %s: %q", ready, b)
			}
			w.report = b
			return
		}
		if procfs.Exited(w.pid) {
			w.err = fmt.Errorf("%s exited before it was ready: %s", script, out.String())
			return
		}
		if time.Now().After(deadline) {
			w.err = fmt.Errorf("%s not ready within %v: %s", script, timeout, out.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ready starts the workload on first use and fails or skips the benchmark
// when it could not start.
func (w *rubyWorkload) ready(b *testing.B, script string, args func(dir string) []string, timeout time.Duration) {
	w.once.Do(func() { w.start(script, args, timeout) })
	if w.skip != "" {
		b.Skip(w.skip)
	}
	if w.err != nil {
		b.Fatal(w.err)
	}
}

// waitAsleep waits for the workload's main thread to sleep (its last full
// GC done).
func waitAsleep(b *testing.B, t *target.Live, vm *rubyvm.VM) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, th := range read(b, t, vm, true) {
			if th.Main && len(th.Frames) > 0 && th.Frames[0].Label == "Kernel#sleep" {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("the workload's main thread never went to sleep")
		}
	}
}

// BenchmarkHeapCensus times `rbscope heap census`'s work on a heap of over
// a million objects: pause, walk every page, name the classes, resume. It
// reports objects/s.
//
//	go test ./bench -run '^$' -bench HeapCensus -benchtime 20x
func BenchmarkHeapCensus(b *testing.B) {
	heapWorkload.ready(b, "heap_census.rb", func(string) []string { return []string{fmt.Sprint(heapExtra)} }, 60*time.Second)
	t, vm := testvm.Attach(b, heapWorkload.pid)
	waitAsleep(b, t, vm)
	var objects uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var c *rubyvm.Census
		err := testvm.Paused(b, vm, func() (err error) {
			vm.ForgetCaches() // name the classes afresh, as one command run does
			c, err = vm.HeapCensus()
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if c.Objects < 1_000_000 {
			b.Fatalf("census found %d objects, want over a million", c.Objects)
		}
		objects += c.Objects
	}
	b.StopTimer()
	b.ReportMetric(float64(objects)/float64(b.N), "objects/op")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(objects)/s, "objects/s")
	}
}
