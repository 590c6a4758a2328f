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
)

// heapExtra is how many objects testdata/heap_census.rb adds to its ~90k
// for the census benchmark: well over a million live objects in all.
const heapExtra = 1_200_000

// heapWorkload is the Ruby process of testdata/heap_census.rb with a large
// heap, started on first use and killed by TestMain's cleanup below.
var heapWorkload struct {
	once sync.Once
	cmd  *exec.Cmd
	dir  string
	pid  int
	skip string
	err  error
}

func init() {
	cleanups = append(cleanups, func() {
		if heapWorkload.cmd != nil {
			_ = heapWorkload.cmd.Process.Kill()
			_ = heapWorkload.cmd.Wait()
		}
		if heapWorkload.dir != "" {
			os.RemoveAll(heapWorkload.dir)
		}
	})
}

func startHeapWorkload() {
	rb := findRuby()
	if rb == "" {
		heapWorkload.skip = "no Ruby installed (apt-get install ruby)"
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "testdata", "heap_census.rb")
	dir, err := os.MkdirTemp("", "rbscope-bench-heap")
	if err != nil {
		heapWorkload.err = err
		return
	}
	heapWorkload.dir = dir
	ready := filepath.Join(dir, "report.json")
	var out strings.Builder
	cmd := exec.Command(rb, script, ready, fmt.Sprint(heapExtra))
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error)
	go func() { // see startWorkload: the forking thread must never end
		runtime.LockOSThread()
		started <- cmd.Start()
		select {}
	}()
	if err := <-started; err != nil {
		heapWorkload.err = fmt.Errorf("start %s: %w", rb, err)
		return
	}
	heapWorkload.cmd = cmd
	heapWorkload.pid = cmd.Process.Pid
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			var doc struct {
				PID int `json:"pid"`
			}
			if err := json.Unmarshal(b, &doc); err != nil || doc.PID != heapWorkload.pid {
				heapWorkload.err = fmt.Errorf("bad report %s: %q", ready, b)
			}
			return
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", heapWorkload.pid)); err != nil || zombie(st) {
			heapWorkload.err = fmt.Errorf("%s exited before it was ready: %s", script, out.String())
			return
		}
		if time.Now().After(deadline) {
			heapWorkload.err = fmt.Errorf("%s not ready within 60 s: %s", script, out.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkHeapCensus times `rbscope heap census`'s work on a heap of over
// a million objects: pause, walk every page, name the classes, resume. It
// reports objects/s.
//
//	go test ./bench -run '^$' -bench HeapCensus -benchtime 20x
func BenchmarkHeapCensus(b *testing.B) {
	heapWorkload.once.Do(startHeapWorkload)
	if heapWorkload.skip != "" {
		b.Skip(heapWorkload.skip)
	}
	if heapWorkload.err != nil {
		b.Fatal(heapWorkload.err)
	}
	t, vm := attach(b, heapWorkload.pid)
	defer t.Close()
	defer vm.Close()
	// Wait for the program's last full GC to end (main thread asleep).
	for deadline := time.Now().Add(30 * time.Second); ; {
		asleep := false
		for _, th := range read(b, t, vm, true) {
			asleep = asleep || (th.Main && len(th.Frames) > 0 && th.Frames[0].Label == "Kernel#sleep")
		}
		if asleep {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the heap workload's main thread never went to sleep")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var objects uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := t.Pause(); err != nil {
			b.Fatal(err)
		}
		vm.ForgetCaches() // name the classes afresh, as one command run does
		c, err := vm.HeapCensus()
		if rerr := t.Resume(); err == nil {
			err = rerr
		}
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
