package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rbscope/rbscope/internal/otlp"
	"github.com/rbscope/rbscope/internal/testruby"
)

// fakeOTLP is an OpenTelemetry receiver of profiles over OTLP/HTTP, built
// on the collector's pdata modules: each request decoded as an
// ExportProfilesServiceRequest (pprofileotlp), each profile kept as a
// received, its resource's attributes as labels.
type fakeOTLP struct {
	mu  sync.Mutex
	got []received
	bad []string
	srv *httptest.Server
}

func newFakeOTLP(t *testing.T) *fakeOTLP {
	f := &fakeOTLP{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+otlp.Path, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := pprofileotlp.NewExportRequest()
		if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			f.fail("Content-Type " + ct)
		}
		if err := req.UnmarshalProto(body); err != nil {
			f.fail("not an ExportProfilesServiceRequest: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ps := req.Profiles()
		d := ps.Dictionary()
		str := func(i int32) string {
			if int(i) >= d.StringTable().Len() {
				f.fail("a string index past the table")
				return ""
			}
			return d.StringTable().At(int(i))
		}
		for _, rp := range ps.ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, prof := range sp.Profiles().All() {
					rec := received{at: time.Now(), labels: map[string]string{}, functions: map[string]bool{}, counts: map[string]int64{},
						clock: str(prof.PeriodType().TypeStrindex()), auth: r.Header.Get("Authorization")}
					for k, v := range rp.Resource().Attributes().All() {
						rec.labels[k] = v.AsString()
					}
					rec.labels["scope"] = sp.Scope().Name()
					for _, s := range prof.Samples().All() {
						n := s.Values().At(0)
						rec.samples += n
						for _, ai := range s.AttributeIndices().All() {
							if int(ai) >= d.AttributeTable().Len() {
								f.fail("an attribute index past the table")
								continue
							}
							a := d.AttributeTable().At(int(ai))
							rec.label(str(a.KeyStrindex()), a.Value().AsString(), n)
						}
						held := map[string]bool{}
						for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
							for _, ln := range d.LocationTable().At(int(li)).Lines().All() {
								name := str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex())
								rec.functions[name] = true
								held[name] = true
							}
						}
						for fn := range held {
							rec.counts[fn] += n
						}
					}
					f.mu.Lock()
					f.got = append(f.got, rec)
					f.mu.Unlock()
				}
			}
		}
		resp, _ := pprofileotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeOTLP) fail(msg string) {
	f.mu.Lock()
	f.bad = append(f.bad, msg)
	f.mu.Unlock()
}

func (f *fakeOTLP) profiles() ([]received, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...), append([]string(nil), f.bad...)
}

// TestAgentOTLP: the agent pushes each process's profile to an
// OpenTelemetry receiver (OTLP/HTTP, the pdata modules' decoding) and to
// Pyroscope at once: the profile holds the workload's method, with the
// process's resource attributes (service.name, process.pid, host.name,
// the runtime, the tags) and the credentials, and Pyroscope gets the same
// process's profile.
func TestAgentOTLP(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	col := newFakeOTLP(t)
	pyro := &fakePyroscope{t: t}
	pyro.start()
	defer pyro.stop()
	cmd := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("agent_work.rb"), "otlp"))
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	pid := strconv.Itoa(cmd.Process.Pid)
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	agentErr := &lockedBuffer{}
	_, exited := startRbscope(t, nil, agentErr, "agent", "--otlp-endpoint", col.srv.URL, "--server", "http://"+pyro.addr,
		"--pid", pid, "--upload-interval", "1s", "--tag", "env=test", "--basic-auth-user", "u", "--basic-auth-password-file", pw)
	start := time.Now()
	var got received
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		checkRuns(t, "the agent", exited, agentErr)
		rs, bad := col.profiles()
		if len(bad) > 0 {
			t.Fatalf("the receiver refused: %v", bad)
		}
		found := false
		for _, r := range rs {
			if r.functions["Object#work_otlp"] {
				got, found = r, true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no OTLP profile holding Object#work_otlp within 60 s (%d profiles); agent said:\n%s", len(rs), agentErr.String())
		}
	}
	version, _ := exec.Command(rb.Bin, "-e", "print RUBY_VERSION").Output()
	for k, v := range map[string]string{"service.name": "agent_work", "process.pid": pid, "process.runtime.name": "ruby",
		"process.runtime.version": string(version), "env": "test", "scope": otlp.ScopeName} {
		if got.labels[k] != v {
			t.Errorf("attribute %s = %q, want %q (%v)", k, got.labels[k], v, got.labels)
		}
	}
	if got.labels["host.name"] == "" || got.clock != "cpu" || got.auth != "Basic dTpzM2NyZXQ=" {
		t.Errorf("host.name %q, period type %q, authorization %q", got.labels["host.name"], got.clock, got.auth)
	}
	if got.counts["Object#work_otlp"]*2 < got.samples {
		t.Errorf("Object#work_otlp in %d of %d samples of a process that runs it without end", got.counts["Object#work_otlp"], got.samples)
	}
	pyro.waitFor(start, "Pyroscope profile of the same process", func(rs []received) bool {
		for _, r := range rs {
			if r.labels["pid"] == pid && r.functions["Object#work_otlp"] {
				return true
			}
		}
		return false
	})
}
