// Package agent profiles every Ruby process of a host (or the ones given)
// without end, and pushes a pprof profile per process per interval to a
// Pyroscope server, with the labels the Pyroscope Ruby gem sends, and to
// an OpenTelemetry receiver; each sample may carry the program's context
// (ctxlabels).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rbscope/rbscope/internal/ctxlabels"
	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/ebpfsample"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// Config is what the agent does.
type Config struct {
	// Server is the Pyroscope server's base URL; OTLPEndpoint an
	// OpenTelemetry receiver's (OTLP/HTTP: http://collector:4318). Either
	// or both: each gets every profile, through a queue of its own.
	Server, OTLPEndpoint string
	// Version is rbscope's, the instrumentation scope's version in OTLP.
	Version string
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
	// processes are found every scanInterval, those Match accepts.
	PIDs  []int
	Match *regexp.Regexp
	// Pause stops the target for each sample (default: read it running).
	Pause bool
	// Realtime runs the sampling thread at real-time priority where the
	// kernel allows it (sampler.Options.Realtime): on a busy host a
	// sampler of the normal class wakes at the scheduler's ticks, when
	// the task on its CPU ends its turn, and its samples bunch up where
	// the targets were preempted.
	Realtime bool
	// EBPF samples with the BPF sampler (ebpfsample.Set): the Ruby frame
	// walk runs in the kernel on each CPU's clock, and the agent wakes 20
	// times a second whatever the rate and the processes; with Wall, a
	// program on the scheduler's context switches adds each thread's time
	// off a CPU (it needs the kernel's BTF). It never pauses, and needs
	// root (CAP_BPF, CAP_PERFMON) in the host's PID namespace.
	EBPF bool
	// CPU and Wall choose the profiles pushed for each process: CPU time
	// (the threads on a CPU; process_cpu) and wall-clock time (every
	// thread, whatever it does; wall). Neither set means CPU.
	CPU, Wall bool
	// ContextLabels labels each sample with the program's context read
	// from its stack (package ctxlabels): endpoint, the Rails controller
	// action, and job, the Sidekiq job class; pprof sample labels for
	// Pyroscope, sample attributes in OTLP.
	ContextLabels bool
	// TenantID goes in X-Scope-OrgID; BasicAuthUser and BasicAuthPassword
	// in the Authorization header.
	TenantID                         string
	BasicAuthUser, BasicAuthPassword string
	// Log receives the agent's one-line notices (each kind once).
	Log io.Writer
	// Started, if set, is called once Run has made its sampler: the
	// options were taken (before, Run can still fail on them).
	Started func()
	// VM are the options for finding each process's Ruby VM. The agent
	// sets VM.Builds when it is nil, so that the processes of one Ruby
	// image (the workers of a server) share what is read of it.
	VM rubyvm.Options
}

// Defaults for what Config leaves zero.
const (
	DefaultUploadInterval = 15 * time.Second
	DefaultRate           = 100
)

const (
	// scanInterval is how often the host's processes are listed again.
	scanInterval = 5 * time.Second
	// queueLength bounds the profiles waiting for the server.
	queueLength = 256
	// procRoot is where processes are listed.
	procRoot = "/proc"
	// maxLabelValue bounds a label value in bytes: service_name comes from
	// a command line, which may be 64 KiB, and a server refuses such.
	maxLabelValue = 128
)

// process names one process: a PID and its start time (0 if unknown),
// so that a refusal does not outlive the process to hit a later one with
// the same PID.
type process struct {
	pid   int
	start uint64
}

// Agent runs the samplers and the uploader.
type Agent struct {
	cfg      Config
	metrics  *Metrics
	uploads  []*queue // one per sink, in the order of sinks
	sinks    []*uploader
	hostname string

	// sampler samples every process in one loop, with a profile each
	// (a *sampler.Sampler, or an *ebpfsample.Set with EBPF).
	sampler processSampler

	mu      sync.Mutex
	running map[int]running    // processes being sampled, by pid
	refused map[process]string // processes not to try again, and why
	said    map[string]bool    // notice kinds already said
}

// processSampler samples the processes added to it until its Run ends,
// handing each one's profiles to Agent.flushed.
type processSampler interface {
	// Add starts sampling pid and returns its Ruby version.
	Add(pid int) (rubyVersion string, err error)
}

// running is a process being sampled: its labels.
type running struct {
	proc   discover.Process
	labels map[string]string
}

// New makes an agent.
func New(cfg Config, metrics *Metrics) *Agent {
	if cfg.UploadInterval <= 0 {
		cfg.UploadInterval = DefaultUploadInterval
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.VM.Builds == nil {
		cfg.VM.Builds = rubyvm.NewBuildCache()
	}
	host, _ := os.Hostname()
	a := &Agent{cfg: cfg, metrics: metrics, hostname: host,
		running: map[int]running{}, refused: map[process]string{}, said: map[string]bool{}}
	if cfg.Server != "" {
		a.sinks = append(a.sinks, newUploader(cfg, metrics, a.say))
	}
	if cfg.OTLPEndpoint != "" {
		a.sinks = append(a.sinks, newOTLPUploader(cfg, metrics, a.say))
	}
	for range a.sinks {
		a.uploads = append(a.uploads, newQueue(queueLength, metrics))
	}
	return a
}

// Run profiles until ctx is done, then flushes what it holds to the
// server for at most flushTimeout, and returns nil; an error says the
// agent could not start (its options). Every process is sampled by one
// loop on one goroutine (sampler.NewSet; ebpfsample.NewSet with EBPF),
// with a profile each.
func (a *Agent) Run(ctx context.Context, flushTimeout time.Duration) error {
	run, err := a.newSampler()
	if err != nil {
		return err
	}
	if a.cfg.Started != nil {
		a.cfg.Started()
	}
	upCtx, stopUploads := context.WithCancel(context.Background())
	uploaded := make(chan struct{})
	var uploading sync.WaitGroup
	for i, up := range a.sinks {
		uploading.Go(func() {
			// A panic (a bug) loses the upload at hand, not the uploader:
			// it goes on with the next, as the queue has moved past it.
			for !up.runSafe(upCtx, a.uploads[i]) {
			}
		})
	}
	go func() {
		uploading.Wait()
		close(uploaded)
	}()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		run(ctx) // pushes what each process collected since its last flush
	}()
	scan := time.NewTicker(scanInterval)
	defer scan.Stop()
	for {
		a.scanSafe(ctx)
		select {
		case <-ctx.Done():
			<-sampled
			for _, q := range a.uploads {
				q.close()
			}
			select {
			case <-uploaded:
			case <-time.After(flushTimeout):
				left := 0
				for _, q := range a.uploads {
					left += q.len()
				}
				a.say("flush", "rbscope agent: the server did not take every profile before the flush timeout; %d dropped", left)
			}
			stopUploads()
			<-uploaded
			return nil
		case <-scan.C:
		}
	}
}

// newSampler makes the agent's sampler (a.sampler) and returns its Run.
func (a *Agent) newSampler() (func(context.Context), error) {
	if a.cfg.EBPF {
		if a.cfg.Pause {
			return nil, errors.New("the BPF sampler reads running processes only: it never pauses them")
		}
		s, err := ebpfsample.NewSet(ebpfsample.SetOptions{
			Rate:         a.cfg.Rate,
			FlushEvery:   a.cfg.UploadInterval,
			VM:           a.cfg.VM,
			Wall:         a.cfg.Wall,
			FlushProcess: a.flushed,
			Failed:       a.failed,
		})
		if err != nil {
			return nil, err
		}
		a.sampler = s
		return s.Run, nil
	}
	s, err := sampler.NewSet(sampler.Options{
		Rate:         a.cfg.Rate,
		Nonblocking:  !a.cfg.Pause,
		Realtime:     a.cfg.Realtime,
		FlushEvery:   a.cfg.UploadInterval,
		VM:           a.cfg.VM,
		PerProcess:   true,
		Wall:         a.cfg.Wall,
		FlushProcess: a.flushed,
		Failed:       a.failed,
	})
	if err != nil {
		return nil, err
	}
	a.sampler = s
	return func(ctx context.Context) { s.Run(ctx) }, nil
}

// scanSafe is startNew, a panic in it said once and the scan tried again
// at the next tick rather than ending the agent.
func (a *Agent) scanSafe(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			a.say("panic:scan", "rbscope agent: internal error while scanning for processes: %v (tried again)", r)
		}
	}()
	a.startNew(ctx)
}

// startNew adds each process to profile not yet sampled to the sampler.
func (a *Agent) startNew(ctx context.Context) {
	var procs []discover.Process
	if len(a.cfg.PIDs) > 0 {
		for _, pid := range a.cfg.PIDs {
			procs = append(procs, discover.Process{PID: pid, Start: discover.StartTime(procRoot, pid)})
		}
	} else {
		var err error
		sampled := func(pid int) bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			_, ok := a.running[pid]
			return ok
		}
		if procs, err = discover.Ruby(procRoot, a.cfg.Match, sampled); err != nil {
			a.say("scan", "rbscope agent: %v", err)
			return
		}
	}
	a.mu.Lock()
	// Refusals of processes gone since (absent from this scan, or their
	// PID now another process's) are forgotten: the map stays as small as
	// the host's process table.
	live := make(map[process]bool, len(procs))
	for _, p := range procs {
		live[process{p.PID, p.Start}] = true
	}
	for p := range a.refused {
		if !live[p] {
			delete(a.refused, p)
		}
	}
	a.mu.Unlock()
	for _, p := range procs {
		if ctx.Err() != nil {
			return // stopping: attaching now would only delay the flush
		}
		a.mu.Lock()
		_, sampled := a.running[p.PID]
		skip := sampled || a.refused[process{p.PID, p.Start}] != ""
		a.mu.Unlock()
		if skip {
			continue
		}
		a.start(p)
	}
	a.mu.Lock()
	a.metrics.processes.Set(float64(len(a.running)))
	a.mu.Unlock()
}

// start attaches to process p and hands it to the sampler, which samples
// it until it exits or the agent stops.
func (a *Agent) start(p discover.Process) {
	pid := p.PID
	defer func() {
		if r := recover(); r != nil { // a bug attaching to this process: not the others'
			a.refuse(p, fmt.Errorf("internal error attaching: %v: %w", r, errPanic))
		}
	}()
	args := p.Args
	if args == "" { // given by --pid: not read by the scan
		args = procfs.Cmdline(procRoot, pid)
	}
	labels := a.labels(pid, args)
	// Registered before the sampler can flush it. A label map, once
	// registered, is never written again: flushes read it unlocked.
	a.mu.Lock()
	a.running[pid] = running{proc: p, labels: labels}
	a.mu.Unlock()
	version, err := a.sampler.Add(pid)
	if err != nil {
		a.mu.Lock()
		delete(a.running, pid)
		a.mu.Unlock()
		if !errors.Is(err, ebpfsample.ErrEnded) { // the agent is stopping
			a.refuse(p, err)
		}
		return
	}
	withVersion := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		withVersion[k] = v
	}
	withVersion["process.runtime.version"] = labelValue(version) // read from the target's memory
	a.mu.Lock()
	if _, ok := a.running[pid]; ok { // not yet flushed as done
		a.running[pid] = running{proc: p, labels: withVersion}
	}
	a.metrics.processes.Set(float64(len(a.running)))
	a.mu.Unlock()
}

// flushed pushes a process's profiles (the sampler's FlushProcess): its
// CPU profile as process_cpu, its wall-clock profile as wall; done says
// it has exited, and a later process with its PID is found anew.
func (a *Agent) flushed(pid int, cpu, wall *profile.Profile, done bool) {
	a.mu.Lock()
	r, ok := a.running[pid]
	if done {
		delete(a.running, pid)
		a.metrics.processes.Set(float64(len(a.running)))
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	if a.cfg.CPU || !a.cfg.Wall {
		a.push(r.labels, "process_cpu", cpu)
	}
	if wall != nil {
		a.push(r.labels, "wall", wall)
	}
}

// failed refuses a process whose sampling failed for good (the sampler's
// Failed): its profile since the last flush is lost, the other processes'
// are not.
func (a *Agent) failed(pid int, err error) {
	a.mu.Lock()
	r, ok := a.running[pid]
	a.mu.Unlock()
	if ok {
		a.refuse(r.proc, fmt.Errorf("%v: %w", err, errPanic))
	}
}

// errPanic marks a process refused because rbscope panicked on it.
var errPanic = errors.New("rbscope bug")

// refuse says why a process cannot be profiled, once per kind, and, when
// that will not change while it lives, remembers not to try it again;
// other failures (a Ruby still starting, its memory read mid-change) are
// tried again at the next scan.
func (a *Agent) refuse(p discover.Process, err error) {
	if errors.Is(err, target.ErrExited) || errors.Is(err, target.ErrNoProcess) {
		return // gone: its PID may name a Ruby process later
	}
	permanent := errors.Is(err, rubyvm.ErrNotRuby) || errors.Is(err, rubyvm.ErrUnsupported) ||
		errors.Is(err, target.ErrPermission) || errors.Is(err, errPanic) ||
		errors.Is(err, ebpfsample.ErrNotAllowed) || errors.Is(err, ebpfsample.ErrUnsupported)
	if permanent {
		a.mu.Lock()
		a.refused[process{p.PID, p.Start}] = err.Error()
		a.mu.Unlock()
	}
	pid := p.PID
	switch {
	case errors.Is(err, rubyvm.ErrNotRuby):
	case errors.Is(err, target.ErrPermission):
		a.say("permission", "rbscope agent: pid %d: %v (other processes refused so too are skipped silently)", pid, err)
	case errors.Is(err, errPanic):
		a.say("panic", "rbscope agent: skipping pid %d (other processes go on): %v", pid, err)
	case errors.Is(err, rubyvm.ErrUnsupported):
		a.say("unsupported", "rbscope agent: skipping pid %d (other processes of unsupported versions are skipped silently): %v", pid, err)
	case errors.Is(err, ebpfsample.ErrNotAllowed) || errors.Is(err, ebpfsample.ErrUnsupported):
		a.say("ebpf", "rbscope agent: skipping pid %d (other processes refused so too are skipped silently): %v", pid, err)
	default:
		a.say("attach:"+errorKind(err), "rbscope agent: cannot attach to pid %d yet: %v (tried again at each scan; said once)", pid, err)
	}
}

// errorKind names the kind of err for saying it once: the sentinel it
// wraps, or the type of the error at its root (an errno by its value), never
// its message, which names PIDs and addresses and would make every
// failure a kind of its own.
func errorKind(err error) string {
	for _, k := range []error{rubyvm.ErrGarbage, rubyvm.ErrFrameBudget, target.ErrReplaced, target.ErrNotRegular, target.ErrUntrusted, target.ErrSnapshotTooBig} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "errno " + errno.Error()
	}
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if es := u.Unwrap(); len(es) > 0 {
				next = es[0]
			}
		}
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
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
		// The command line as ps shows it, which servers set per
		// process ("puma: cluster worker 0: 4242 [app]", "unicorn
		// worker[1] ..."): what tells a master from its workers.
		"process.title": args,
	}
	if l["service_name"] == "" {
		l["service_name"] = discover.ServiceName(args)
	}
	for k, v := range a.cfg.Tags {
		l[k] = v
	}
	for k, v := range l {
		l[k] = labelValue(v)
	}
	return l
}

// labelValue makes v a value every server takes: valid UTF-8 (protobuf
// refuses to encode a string that is not, and a command line may be any
// bytes) and at most maxLabelValue bytes, cut at a character's boundary.
func labelValue(v string) string {
	v = strings.ToValidUTF8(v, "\uFFFD")
	if len(v) <= maxLabelValue {
		return v
	}
	n := maxLabelValue
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}

// push queues one profile for the server under the profile name (the
// __name__ label) given (a profile without samples is not sent).
func (a *Agent) push(labels map[string]string, name string, p *profile.Profile) {
	if p == nil || len(p.Stacks) == 0 {
		return
	}
	n := 0
	for _, st := range p.Stacks {
		n += st.Count
	}
	a.metrics.samples.Add(float64(n))
	if a.cfg.ContextLabels {
		// Before the profile is queued: the sinks read it at once.
		ctxlabels.Annotate(p, labelValue)
	}
	lc := make(map[string]string, len(labels))
	for k, v := range labels {
		lc[k] = v
	}
	lc["__name__"] = name
	for _, q := range a.uploads {
		q.put(&upload{labels: lc, profile: p})
	}
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
