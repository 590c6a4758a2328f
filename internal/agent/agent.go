// Package agent profiles every Ruby process of a host (or the ones given)
// without end, and pushes a pprof profile per process per interval to a
// Pyroscope server, with the labels the Pyroscope Ruby gem sends.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// Config is what the agent does.
type Config struct {
	// Server is the Pyroscope server's base URL.
	Server string
	// ServiceName names every process's profiles; "" derives one from each
	// process's command line (discover.ServiceName).
	ServiceName string
	// Tags are extra labels on every profile.
	Tags map[string]string
	// UploadInterval is how long each profile covers.
	UploadInterval time.Duration
	// Rate is samples per second per process.
	Rate float64
	// PIDs, when set, are the processes to profile; else the host's Ruby
	// processes are found every ScanInterval, those Match accepts.
	PIDs         []int
	Match        *regexp.Regexp
	ScanInterval time.Duration
	// Pause stops the target for each sample (default: read it running).
	Pause bool
	// TenantID goes in X-Scope-OrgID; BasicAuthUser and BasicAuthPassword
	// in the Authorization header.
	TenantID                         string
	BasicAuthUser, BasicAuthPassword string
	// QueueLength bounds the profiles waiting for the server.
	QueueLength int
	// Log receives the agent's one-line notices (each kind once).
	Log io.Writer
	// Proc is where processes are listed ("/proc").
	Proc string
	// VM are the options for finding each process's Ruby VM.
	VM rubyvm.Options
}

// Defaults for what Config leaves zero.
const (
	DefaultUploadInterval = 15 * time.Second
	DefaultRate           = 100
	DefaultScanInterval   = 5 * time.Second
	DefaultQueueLength    = 256
)

// Agent runs the samplers and the uploader.
type Agent struct {
	cfg      Config
	metrics  *Metrics
	uploads  *queue
	hostname string

	mu      sync.Mutex
	running map[int]bool   // pids being sampled
	refused map[int]string // pids not to try again, and why
	said    map[string]bool
}

// New makes an agent; metrics may be nil.
func New(cfg Config, metrics *Metrics) *Agent {
	if cfg.UploadInterval <= 0 {
		cfg.UploadInterval = DefaultUploadInterval
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.QueueLength <= 0 {
		cfg.QueueLength = DefaultQueueLength
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	host, _ := os.Hostname()
	return &Agent{cfg: cfg, metrics: metrics, uploads: newQueue(cfg.QueueLength, metrics), hostname: host,
		running: map[int]bool{}, refused: map[int]string{}, said: map[string]bool{}}
}

// Run profiles until ctx is done, then flushes what it holds to the
// server for at most flushTimeout, and returns.
func (a *Agent) Run(ctx context.Context, flushTimeout time.Duration) error {
	up := newUploader(a.cfg, a.metrics, a.say)
	upCtx, stopUploads := context.WithCancel(context.Background())
	uploaded := make(chan struct{})
	go func() {
		defer close(uploaded)
		up.run(upCtx, a.uploads)
	}()
	var samplers sync.WaitGroup
	scan := time.NewTicker(a.cfg.ScanInterval)
	defer scan.Stop()
	for {
		a.startNew(ctx, &samplers)
		select {
		case <-ctx.Done():
			samplers.Wait() // each pushes what it collected since its last flush
			a.uploads.close()
			select {
			case <-uploaded:
			case <-time.After(flushTimeout):
				a.say("flush", "rbscope agent: the server did not take every profile before the flush timeout; %d dropped", a.uploads.len())
			}
			stopUploads()
			<-uploaded
			return nil
		case <-scan.C:
		}
	}
}

// startNew starts a sampler for each process to profile not yet sampled.
func (a *Agent) startNew(ctx context.Context, wg *sync.WaitGroup) {
	var pids []int
	args := map[int]string{}
	if len(a.cfg.PIDs) > 0 {
		pids = a.cfg.PIDs
	} else {
		procs, err := discover.Ruby(a.cfg.Proc, a.cfg.Match)
		if err != nil {
			a.say("scan", "rbscope agent: %v", err)
			return
		}
		for _, p := range procs {
			pids = append(pids, p.PID)
			args[p.PID] = p.Args
		}
	}
	for _, pid := range pids {
		a.mu.Lock()
		skip := a.running[pid] || a.refused[pid] != ""
		a.mu.Unlock()
		if skip {
			continue
		}
		a.start(ctx, wg, pid, args[pid])
	}
	a.mu.Lock()
	a.metrics.processes.Set(float64(len(a.running)))
	a.mu.Unlock()
}

// start attaches to pid and samples it in its own goroutine until it
// exits or ctx is done.
func (a *Agent) start(ctx context.Context, wg *sync.WaitGroup, pid int, args string) {
	if args == "" { // given by --pid: not read by the scan
		args = discover.Cmdline(a.cfg.Proc, pid)
	}
	labels := a.labels(pid, args)
	opts := sampler.Options{
		Rate:        a.cfg.Rate,
		Nonblocking: !a.cfg.Pause,
		FlushEvery:  a.cfg.UploadInterval,
		VM:          a.cfg.VM,
	}
	opts.Flush = func(p *profile.Profile) { a.push(labels, p) }
	s, err := sampler.New(pid, opts)
	if err != nil {
		a.refuse(pid, err)
		return
	}
	labels["process.runtime.version"] = s.RubyVersion()
	a.mu.Lock()
	a.running[pid] = true
	a.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := s.Run(ctx)
		a.push(labels, last)
		a.mu.Lock()
		delete(a.running, pid) // exited: a later process with its PID is found anew
		a.metrics.processes.Set(float64(len(a.running)))
		a.mu.Unlock()
	}()
}

// refuse remembers a process not to try again and says why, once per kind.
func (a *Agent) refuse(pid int, err error) {
	if errors.Is(err, target.ErrExited) || errors.Is(err, target.ErrNoProcess) {
		return // gone: its PID may name a Ruby process later
	}
	a.mu.Lock()
	a.refused[pid] = err.Error()
	a.mu.Unlock()
	switch {
	case errors.Is(err, rubyvm.ErrNotRuby):
	case errors.Is(err, target.ErrPermission):
		a.say("permission", "rbscope agent: pid %d: %v (other processes refused so too are skipped silently)", pid, err)
	case errors.Is(err, rubyvm.ErrUnsupported):
		a.say("unsupported:"+err.Error(), "rbscope agent: skipping pid %d: %v", pid, err)
	default:
		a.say("attach:"+err.Error(), "rbscope agent: skipping pid %d: %v", pid, err)
	}
}

// labels are the ones the Pyroscope Ruby gem sends, and the user's tags.
func (a *Agent) labels(pid int, args string) map[string]string {
	l := map[string]string{
		"__name__":             "process_cpu",
		"service_name":         a.cfg.ServiceName,
		"pid":                  fmt.Sprint(pid),
		"hostname":             a.hostname,
		"process.runtime.name": "ruby",
	}
	if l["service_name"] == "" {
		l["service_name"] = discover.ServiceName(args)
	}
	for k, v := range a.cfg.Tags {
		l[k] = v
	}
	return l
}

// push queues one profile for the server (a profile without samples is
// not sent).
func (a *Agent) push(labels map[string]string, p *profile.Profile) {
	if p == nil || len(p.Stacks) == 0 {
		return
	}
	n := 0
	for _, st := range p.Stacks {
		n += st.Count
	}
	a.metrics.samples.Add(float64(n))
	lc := make(map[string]string, len(labels))
	for k, v := range labels {
		lc[k] = v
	}
	a.uploads.put(&upload{labels: lc, profile: p})
}

// say writes a notice once per key.
func (a *Agent) say(key, format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.said[key] {
		return
	}
	a.said[key] = true
	// Errors name the targets' files: what reaches a terminal is escaped.
	fmt.Fprintln(a.cfg.Log, textsafe.Clean(fmt.Sprintf(format, args...)))
}
