package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
)

// heapDumpExtra is how many small Strings testdata/heap_graph.rb adds to
// its ~20k objects for the dump the heap analysis benchmarks read.
const heapDumpExtra = 1_000_000

// heapDump is an ObjectSpace.dump_all file of over a million objects,
// written on first use and removed by TestMain's cleanup.
var heapDump struct {
	once sync.Once
	dir  string
	path string
	size int64
	skip string
	err  error
}

func init() {
	cleanups = append(cleanups, func() {
		if heapDump.dir != "" {
			os.RemoveAll(heapDump.dir)
		}
	})
}

func makeHeapDump() {
	rb := findRuby()
	if rb == "" {
		heapDump.skip = "no Ruby installed (apt-get install ruby)"
		return
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "testdata", "heap_graph.rb")
	dir, err := os.MkdirTemp("", "rbscope-bench-heapdump")
	if err != nil {
		heapDump.err = err
		return
	}
	heapDump.dir = dir
	heapDump.path = filepath.Join(dir, "heap.json")
	out, err := exec.Command(rb, script, filepath.Join(dir, "report.json"), heapDump.path, fmt.Sprint(heapDumpExtra)).CombinedOutput()
	if err != nil {
		heapDump.err = fmt.Errorf("%s: %v: %s", script, err, out)
		return
	}
	st, err := os.Stat(heapDump.path)
	if err != nil {
		heapDump.err = err
		return
	}
	heapDump.size = st.Size()
}

func needHeapDump(b *testing.B) {
	heapDump.once.Do(makeHeapDump)
	if heapDump.skip != "" {
		b.Skip(heapDump.skip)
	}
	if heapDump.err != nil {
		b.Fatal(heapDump.err)
	}
}

// peakHeap samples the Go heap in use every few milliseconds while f runs
// and returns its peak above what was in use before f.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	peak := base
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	f()
	runtime.ReadMemStats(&ms)
	close(done)
	<-stopped
	peak = max(peak, ms.HeapInuse)
	return peak - base
}

// cpuTime returns the process's user and system CPU time: on a busy
// machine objects per CPU second says more than per wall second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHeapLoad reads a dump_all file of over a million objects into a
// heap.Graph and reports objects/s, MB/s of JSON and the peak Go heap in
// use while reading as a multiple of the file's size.
//
//	go test ./bench -run '^$' -bench 'HeapLoad|HeapDominators|HeapTop' -benchtime 3x
func BenchmarkHeapLoad(b *testing.B) {
	needHeapDump(b)
	var objects int
	var peak uint64
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		peak = max(peak, peakHeap(func() {
			c0 := cpuTime()
			g, err := heap.LoadFile(heapDump.path)
			cpu += cpuTime() - c0
			if err != nil {
				b.Fatal(err)
			}
			if g.Len() < 1_000_000 {
				b.Fatalf("%d objects, want over a million", g.Len())
			}
			objects += g.Len()
		}))
	}
	b.StopTimer()
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(objects)/s, "objects/s")
	b.ReportMetric(float64(objects)/cpu.Seconds(), "objects/cpu-s")
	b.ReportMetric(float64(heapDump.size)*float64(b.N)/s/1e6, "MB/s")
	b.ReportMetric(float64(heapDump.size)/1e6, "file-MB")
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(float64(peak)/float64(heapDump.size), "peak/file")
}

// BenchmarkHeapDominators computes the dominator tree and retained sizes
// of the same dump (loaded once) and reports objects/s.
func BenchmarkHeapDominators(b *testing.B) {
	needHeapDump(b)
	g, err := heap.LoadFile(heapDump.path)
	if err != nil {
		b.Fatal(err)
	}
	var objects int
	c0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		d := heap.Dominators(g)
		if d.Reachable < 1_000_000 {
			b.Fatalf("%d reachable objects, want over a million", d.Reachable)
		}
		objects += g.Len()
	}
	b.StopTimer()
	b.ReportMetric(float64(objects)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(objects)/(cpuTime()-c0).Seconds(), "objects/cpu-s")
}

// BenchmarkHeapTop is `rbscope heap top`'s work: load, dominators, the 20
// biggest retainers. It reports objects/s and the peak Go heap in use as a
// multiple of the file's size.
func BenchmarkHeapTop(b *testing.B) {
	needHeapDump(b)
	var objects int
	var peak uint64
	b.ResetTimer()
	for b.Loop() {
		peak = max(peak, peakHeap(func() {
			g, err := heap.LoadFile(heapDump.path)
			if err != nil {
				b.Fatal(err)
			}
			top := heap.Dominators(g).Top(20)
			if len(top) != 20 {
				b.Fatalf("%d retainers", len(top))
			}
			objects += g.Len()
		}))
	}
	b.StopTimer()
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(objects)/s, "objects/s")
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(float64(peak)/float64(heapDump.size), "peak/file")
}
