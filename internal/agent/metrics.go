package agent

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/procfs"
)

// Metrics are the agent's own: what it profiles and how its uploads fare,
// with the Go runtime's and its process's (CPU seconds, memory), served in
// Prometheus's text format.
//
// They are written here rather than with the Prometheus client library:
// rbscope is one binary, and every command (a 10 ms stack among them)
// would pay for that library's initialization and code.
type Metrics struct {
	processes *Gauge
	samples   *Counter
	uploads   *CounterVec
	dropped   *CounterVec
	queue     *Gauge
	all       []metric
}

// metric is one metric family of the agent's own.
type metric struct {
	name, help, typ string
	write           func(w *bufio.Writer, name string)
}

// NewMetrics makes the agent's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		processes: &Gauge{},
		samples:   &Counter{},
		uploads:   newCounterVec("result", "ok", "failed"),
		dropped:   newCounterVec("reason", "queue_full", "rejected", "unencodable"),
		queue:     &Gauge{},
	}
	m.all = []metric{
		{"rbscope_agent_processes", "Ruby processes being profiled.", "gauge", m.processes.write},
		{"rbscope_agent_samples_total", "Samples taken, over all processes.", "counter", m.samples.write},
		{"rbscope_agent_uploads_total", "Profile uploads by outcome (ok, failed: each failed attempt).", "counter", m.uploads.write},
		{"rbscope_agent_uploads_dropped_total", "Profiles dropped unsent, by reason: queue_full (the server was away), rejected (refused as invalid), unencodable.", "counter", m.dropped.write},
		{"rbscope_agent_upload_queue_length", "Profiles waiting for the server.", "gauge", m.queue.write},
	}
	return m
}

// Handler serves the metrics in Prometheus's text format (0.0.4).
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		for _, f := range m.all {
			fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
			f.write(bw, f.name)
		}
		writeProcess(bw)
		writeGo(bw)
		bw.Flush()
	})
}

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the gauge.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Value returns the gauge's value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func (g *Gauge) write(w *bufio.Writer, name string) { sample(w, name, "", g.Value()) }

// Counter is a value that only goes up.
type Counter struct{ bits atomic.Uint64 }

// Add adds v (not negative) to the counter.
func (c *Counter) Add(v float64) {
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Value returns the counter's value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

func (c *Counter) write(w *bufio.Writer, name string) { sample(w, name, "", c.Value()) }

// CounterVec is counters told apart by one label, whose values are fixed
// when it is made (each shown from zero).
type CounterVec struct {
	label  string
	values []string
	by     map[string]*Counter
}

func newCounterVec(label string, values ...string) *CounterVec {
	v := &CounterVec{label: label, values: values, by: map[string]*Counter{}}
	for _, s := range values {
		v.by[s] = &Counter{}
	}
	return v
}

// WithLabelValues returns the counter of the label's value value, which
// must be one the vector was made with.
func (v *CounterVec) WithLabelValues(value string) *Counter {
	c, ok := v.by[value]
	if !ok {
		panic(fmt.Sprintf("metric label %s=%q is not one of %v", v.label, value, v.values))
	}
	return c
}

func (v *CounterVec) write(w *bufio.Writer, name string) {
	for _, s := range v.values {
		sample(w, name, v.label+"="+strconv.Quote(s), v.by[s].Value())
	}
}

// sample writes one sample line.
func sample(w *bufio.Writer, name, labels string, v float64) {
	w.WriteString(name)
	if labels != "" {
		w.WriteString("{" + labels + "}")
	}
	w.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
}

// family writes a metric family of one sample.
func family(w *bufio.Writer, name, typ, help string, v float64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	sample(w, name, "", v)
}

// writeProcess writes the process's metrics, as Prometheus's process
// collector names them; those /proc does not give are left out.
func writeProcess(w *bufio.Writer) {
	p, err := procfs.Self()
	if err != nil {
		return
	}
	if st, err := p.Stat(); err == nil {
		family(w, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", st.CPUTime())
		family(w, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", float64(st.ResidentMemory()))
		family(w, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", float64(st.VirtualMemory()))
		if t, err := st.StartTime(); err == nil {
			family(w, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", t)
		}
	}
	if n, err := p.FileDescriptorsLen(); err == nil {
		family(w, "process_open_fds", "gauge", "Number of open file descriptors.", float64(n))
	}
	if l, err := p.Limits(); err == nil {
		family(w, "process_max_fds", "gauge", "Maximum number of open file descriptors.", float64(l.OpenFiles))
	}
}

// writeGo writes the Go runtime's metrics, as Prometheus's Go collector
// names them (its memory statistics, goroutines and version).
func writeGo(w *bufio.Writer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	family(w, "go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine()))
	fmt.Fprintf(w, "# HELP go_info Information about the Go environment.\n# TYPE go_info gauge\ngo_info{version=%s} 1\n", strconv.Quote(runtime.Version()))
	for _, s := range []struct {
		name, typ, help string
		v               uint64
	}{
		{"go_memstats_alloc_bytes", "gauge", "Number of bytes allocated in heap and currently in use.", ms.Alloc},
		{"go_memstats_alloc_bytes_total", "counter", "Total number of bytes allocated in heap until now, even if released already.", ms.TotalAlloc},
		{"go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.", ms.Sys},
		{"go_memstats_mallocs_total", "counter", "Total number of heap objects allocated.", ms.Mallocs},
		{"go_memstats_frees_total", "counter", "Total number of heap objects frees.", ms.Frees},
		{"go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use.", ms.HeapAlloc},
		{"go_memstats_heap_sys_bytes", "gauge", "Number of heap bytes obtained from system.", ms.HeapSys},
		{"go_memstats_heap_idle_bytes", "gauge", "Number of heap bytes waiting to be used.", ms.HeapIdle},
		{"go_memstats_heap_inuse_bytes", "gauge", "Number of heap bytes that are in use.", ms.HeapInuse},
		{"go_memstats_heap_released_bytes", "gauge", "Number of heap bytes released to OS.", ms.HeapReleased},
		{"go_memstats_heap_objects", "gauge", "Number of currently allocated objects.", ms.HeapObjects},
		{"go_memstats_stack_inuse_bytes", "gauge", "Number of bytes obtained from system for stack allocator.", ms.StackInuse},
		{"go_memstats_stack_sys_bytes", "gauge", "Number of bytes obtained from system for stack allocator.", ms.StackSys},
		{"go_memstats_gc_sys_bytes", "gauge", "Number of bytes used for garbage collection system metadata.", ms.GCSys},
		{"go_memstats_next_gc_bytes", "gauge", "Number of heap bytes when next garbage collection will take place.", ms.NextGC},
	} {
		family(w, s.name, s.typ, s.help, float64(s.v))
	}
	family(w, "go_memstats_last_gc_time_seconds", "gauge", "Number of seconds since 1970 of last garbage collection.", float64(ms.LastGC)/1e9)
}
