package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	pprof "github.com/google/pprof/profile"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	"github.com/rbscope/rbscope/internal/testruby"
)

// Helpers the agent's tests and others share: a Pyroscope server that
// decodes what it takes, a child's output read while it writes, and
// starting rbscope and watching it run.

// received is one profile a fake Pyroscope server took.
type received struct {
	at        time.Time
	labels    map[string]string
	functions map[string]bool
	// clock is the profile's time ("cpu" or "wall"); counts are how many
	// samples hold each function, and samples how many there are.
	clock   string
	counts  map[string]int64
	samples int64
	tenant  string
	auth    string
	// labelled counts the samples by their own labels (pprof sample
	// labels, OTLP sample attributes): key, then value.
	labelled map[string]map[string]int64
}

// label counts n samples more with the sample label key=value.
func (r *received) label(key, value string, n int64) {
	if r.labelled == nil {
		r.labelled = map[string]map[string]int64{}
	}
	if r.labelled[key] == nil {
		r.labelled[key] = map[string]int64{}
	}
	r.labelled[key][value] += n
}

// fakePyroscope is a Pyroscope-compatible server: the API module's
// generated Push handler, every upload decoded with google/pprof.
type fakePyroscope struct {
	mu   sync.Mutex
	got  []received
	addr string
	srv  *http.Server
	t    *testing.T
}

func (f *fakePyroscope) Push(ctx context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	for _, s := range req.Msg.Series {
		r := received{at: time.Now(), labels: map[string]string{}, functions: map[string]bool{}, counts: map[string]int64{},
			tenant: req.Header().Get("X-Scope-OrgID"), auth: req.Header().Get("Authorization")}
		for _, l := range s.Labels {
			r.labels[l.Name] = l.Value
		}
		for _, smp := range s.Samples {
			p, err := pprof.ParseData(smp.RawProfile)
			if err != nil {
				f.t.Errorf("an upload is not a pprof profile: %v", err)
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			if len(p.SampleType) == 0 {
				f.t.Errorf("a profile without sample types")
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no sample types"))
			}
			last := p.SampleType[len(p.SampleType)-1]
			if r.clock = last.Type; (last.Type != "cpu" && last.Type != "wall") || last.Unit != "nanoseconds" {
				f.t.Errorf("sample types %v, want cpu/nanoseconds or wall/nanoseconds", p.SampleType)
			}
			want := map[string]string{"process_cpu": "cpu", "wall": "wall"}[r.labels["__name__"]]
			if r.clock != want {
				f.t.Errorf("a %s profile (__name__ %q) of %s time", want, r.labels["__name__"], r.clock)
			}
			for _, fn := range p.Function {
				r.functions[fn.Name] = true
			}
			for _, smp := range p.Sample {
				r.samples += smp.Value[0]
				for k, vs := range smp.Label {
					for _, v := range vs {
						r.label(k, v, smp.Value[0])
					}
				}
				held := map[string]bool{}
				for _, loc := range smp.Location {
					for _, l := range loc.Line {
						held[l.Function.Name] = true
					}
				}
				for fn := range held {
					r.counts[fn] += smp.Value[0]
				}
			}
		}
		f.mu.Lock()
		f.got = append(f.got, r)
		f.mu.Unlock()
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

// start serves on f.addr (a fresh port the first time).
func (f *fakePyroscope) start() {
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		f.t.Fatalf("setup: listen %s: %v", addr, err)
	}
	f.addr = ln.Addr().String()
	mux := http.NewServeMux()
	path, h := pushv1connect.NewPusherServiceHandler(f)
	mux.Handle(path, h)
	f.srv = &http.Server{Handler: mux}
	go f.srv.Serve(ln)
}

func (f *fakePyroscope) stop() { f.srv.Close() }

// since returns the profiles taken after t.
func (f *fakePyroscope) since(t time.Time) []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []received
	for _, r := range f.got {
		if r.at.After(t) {
			out = append(out, r)
		}
	}
	return out
}

// waitFor waits until cond holds of the profiles taken after t.
func (f *fakePyroscope) waitFor(t time.Time, what string, cond func([]received) bool) {
	f.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond(f.since(t)) {
			return
		}
	}
	rs := f.since(t)
	for i := 0; i < len(rs) && i < 3; i++ {
		f.t.Logf("profile %d: labels %v functions %v", i, rs[i].labels, rs[i].functions)
	}
	f.t.Fatalf("no %s within 60 s; got %d profiles", what, len(rs))
}

// lockedBuffer is a child's stderr, read while the child writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// startRbscope starts rbscope with args, its standard output into stdout
// (when not nil) and its standard error into stderr; exited is closed once
// it has ended (cmd.ProcessState is then set), and it is killed and reaped
// when the test ends.
func startRbscope(t *testing.T, stdout io.Writer, stderr *lockedBuffer, args ...string) (cmd *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	cmd = exec.Command(rbscopeBin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd, done
}

// checkRuns ends the test when rbscope started by startRbscope has ended
// (exited closed) while it should run: skipped where the BPF sampler was
// refused, failed otherwise, with what it said (stderr). what names the
// command.
func checkRuns(t *testing.T, what string, exited <-chan struct{}, stderr *lockedBuffer) {
	t.Helper()
	select {
	case <-exited:
		skipIfEBPFRefused(t, what, stderr.String())
		t.Fatalf("%s exited: %s", what, stderr.String())
	default:
	}
}

// waitProcesses waits up to d for the agent's metrics at addr to count n
// processes, and else fails the test, saying when (what) and what the
// agent said.
func waitProcesses(t *testing.T, addr string, n int, d time.Duration, what string, agentErr *lockedBuffer) {
	t.Helper()
	want := fmt.Sprintf("rbscope_agent_processes %d\n", n)
	last := ""
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if last = grepLines(string(b), "rbscope_agent_processes"); strings.Contains(string(b), want) {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the agent does not count %d processes within %v:\n%s\nagent:\n%s", what, n, d, last, agentErr.String())
		}
	}
}

// sleepHalfSpent is what testdata/sleep_half.rb says it spent so far: its
// time computing and napping.
type sleepHalfSpent struct {
	PID          int
	Compute, Nap float64
}

// startSleepHalf runs testdata/sleep_half.rb on rb (marker in its command
// line), killed when the test ends, and returns it and a function that
// reads its latest report.
func startSleepHalf(t *testing.T, rb testruby.Ruby, marker string) (*exec.Cmd, func() sleepHalfSpent) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "spent.json")
	prog := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("sleep_half.rb"), report, marker))
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Process.Kill(); prog.Wait() })
	return prog, func() sleepHalfSpent {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var s sleepHalfSpent
			if b, err := os.ReadFile(report); err == nil && json.Unmarshal(b, &s) == nil && s.PID > 0 {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatal("setup: sleep_half.rb wrote no report")
			}
		}
	}
}
