package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
)

// TestAgentPushesToPyroscope: the agent finds two Ruby workloads by itself
// (no --pid), pushes each one's profile with the gem's labels, the tenant
// and the credentials; it keeps profiling while the server is away and
// resumes when it is back (the failures counted), goes on when a target is
// killed, reads its --config file again on SIGHUP, and flushes and exits on
// SIGTERM.
func TestAgentPushesToPyroscope(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	srv := &fakePyroscope{t: t}
	srv.start()
	defer srv.stop()
	marker := fmt.Sprintf("agentmark%d", time.Now().UnixNano())
	work := map[string]*exec.Cmd{}
	for _, name := range []string{"alpha", "beta"} {
		cmd := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("agent_work.rb"), name, marker))
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		bufio.NewReader(out).ReadString('\n')
		work[name] = cmd
	}
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	metricsAddr := ln.Addr().String()
	ln.Close()
	config := filepath.Join(t.TempDir(), "agent.flags")
	os.WriteFile(config, []byte("# flags read again on SIGHUP\n--tag env=test --rate 50\n"), 0o600)
	agentCmd := exec.Command(rbscopeBin, "agent", "--server", "http://"+srv.addr, "--match", marker,
		"--upload-interval", "1s", "--rate", "20", "--config", config, "--tenant-id", "t1",
		"--basic-auth-user", "u", "--basic-auth-password-file", pw, "--metrics-addr", metricsAddr)
	agentErr := &lockedBuffer{}
	agentCmd.Stderr = agentErr
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer agentCmd.Process.Kill()
	start := time.Now()

	pidOf := func(name string) string { return strconv.Itoa(work[name].Process.Pid) }
	from := func(rs []received, name string) []received {
		var out []received
		for _, r := range rs {
			if r.labels["pid"] == pidOf(name) {
				out = append(out, r)
			}
		}
		return out
	}
	srv.waitFor(start, "profile of both workloads holding their methods", func(rs []received) bool {
		ok := 0
		for _, name := range []string{"alpha", "beta"} {
			for _, r := range from(rs, name) {
				if r.functions["Object#work_"+name] {
					ok++
					break
				}
			}
		}
		return ok == 2
	})
	version, _ := exec.Command(rb.Bin, "-e", "print RUBY_VERSION").Output()
	for _, r := range from(srv.since(start), "alpha")[:1] {
		want := map[string]string{"__name__": "process_cpu", "service_name": "agent_work", "pid": pidOf("alpha"),
			"process.runtime.name": "ruby", "process.runtime.version": string(version), "env": "test"}
		for k, v := range want {
			if r.labels[k] != v {
				t.Errorf("label %s = %q, want %q (labels %v)", k, r.labels[k], v, r.labels)
			}
		}
		if r.labels["hostname"] == "" {
			t.Errorf("no hostname label: %v", r.labels)
		}
		if r.tenant != "t1" || r.auth != "Basic dTpzM2NyZXQ=" {
			t.Errorf("tenant %q, authorization %q", r.tenant, r.auth)
		}
		if r.functions["Object#work_beta"] {
			t.Error("alpha's profile holds beta's method")
		}
	}

	// The server goes away for a few seconds and comes back.
	srv.stop()
	time.Sleep(3 * time.Second)
	back := time.Now()
	srv.start()
	srv.waitFor(back, "profile after the server came back", func(rs []received) bool { return len(from(rs, "alpha")) > 0 })
	metrics := func() string {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := metrics(); !strings.Contains(m, `rbscope_agent_uploads_total{result="ok"}`) || strings.Contains(m, `rbscope_agent_uploads_total{result="failed"} 0`) {
		t.Errorf("the metrics do not count the failed uploads:\n%s", grepLines(m, "rbscope_agent"))
	}

	// A target is killed: the agent goes on with the other.
	work["beta"].Process.Kill()
	work["beta"].Wait()
	killed := time.Now()
	srv.waitFor(killed.Add(2*time.Second), "profile of alpha after beta was killed", func(rs []received) bool { return len(from(rs, "alpha")) > 0 })
	if m := metrics(); !strings.Contains(m, "rbscope_agent_processes 1") {
		t.Errorf("processes after a kill:\n%s", grepLines(m, "rbscope_agent_processes"))
	}

	// SIGHUP: the --config file is read again.
	os.WriteFile(config, []byte("--tag env=changed\n"), 0o600)
	hup := time.Now()
	agentCmd.Process.Signal(syscall.SIGHUP)
	srv.waitFor(hup, "profile with the tag of the config read again", func(rs []received) bool {
		for _, r := range from(rs, "alpha") {
			if r.labels["env"] == "changed" {
				return true
			}
		}
		return false
	})

	// SIGTERM: what is held is pushed, and the agent exits. So that the
	// profile seen after it is the flush's, not a periodic upload's, the
	// agent is first made to hold its profiles for an hour.
	os.WriteFile(config, []byte("--tag env=changed --upload-interval 1h\n"), 0o600)
	agentCmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(agentErr.String(), "every 1h0m0s"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not take --upload-interval 1h on SIGHUP; stderr:\n%s", agentErr.String())
		}
	}
	// The run before the SIGHUP pushed what it held before the new one
	// started (and said so): from here on, alpha's profile is held.
	held := time.Now()
	time.Sleep(2 * time.Second)
	if rs := from(srv.since(held), "alpha"); len(rs) > 0 {
		t.Fatalf("setup: %d profiles of alpha pushed with --upload-interval 1h", len(rs))
	}
	term := time.Now()
	agentCmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- agentCmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit on SIGTERM")
	}
	if len(from(srv.since(term), "alpha")) == 0 {
		t.Errorf("nothing flushed on SIGTERM; stderr:\n%s", agentErr.String())
	}
}

// TestAgentBadFlags: each mistake is one line naming the flag, exit 2.
func TestAgentBadFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.flags")
	os.WriteFile(bad, []byte("--rate fast\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"agent"}, "--server URL or --otlp-endpoint URL is required"},
		{[]string{"agent", "--server", "ftp://x"}, "want an http:// or https:// URL"},
		{[]string{"agent", "--otlp-endpoint", "x:4318"}, "--otlp-endpoint \"x:4318\": want an http:// or https:// URL"},
		{[]string{"agent", "--server", "http://x", "--tag", "novalue"}, "--tag"},
		{[]string{"agent", "--server", "http://x", "--match", "("}, "--match"},
		{[]string{"agent", "--server", "http://x", "--basic-auth-user", "u"}, "go together"},
		{[]string{"agent", "--server", "http://x", "--config", bad}, "--config"},
		{[]string{"agent", "--server", "http://x", "--config", "/nonexistent/flags"}, "--config"},
	} {
		_, errOut, code := rbscope(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line saying %q", c.args, code, errOut, c.want)
		}
	}
}

// refusingPusher answers every push with an error of one code.
type refusingPusher struct {
	code  connect.Code
	mu    sync.Mutex
	calls int
}

func (r *refusingPusher) Push(context.Context, *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	return nil, connect.NewError(r.code, errors.New("refused by the test"))
}

// TestAgentServerRefuses: a server that refuses the credentials, or fails,
// is said once; the agent keeps sampling and backs off instead of spinning.
func TestAgentServerRefuses(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	marker := fmt.Sprintf("agentrefuse%d", time.Now().UnixNano())
	work := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("agent_work.rb"), "gamma", marker))
	out, _ := work.StdoutPipe()
	if err := work.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { work.Process.Kill(); work.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	for _, c := range []struct {
		code connect.Code
		say  string
	}{
		{connect.CodeUnauthenticated, "refuses the credentials"},
		{connect.CodeUnavailable, "cannot upload to"},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			p := &refusingPusher{code: c.code}
			mux := http.NewServeMux()
			path, h := pushv1connect.NewPusherServiceHandler(p)
			mux.Handle(path, h)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: mux}
			go srv.Serve(ln)
			defer srv.Close()
			agentCmd := exec.Command(rbscopeBin, "agent", "--server", "http://"+ln.Addr().String(), "--pid", strconv.Itoa(work.Process.Pid),
				"--upload-interval", "500ms", "--rate", "50")
			var stderr strings.Builder
			agentCmd.Stderr = &stderr
			if err := agentCmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer agentCmd.Process.Kill()
			callsNow := func() int {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.calls
			}
			// From its first attempt (however slow its start on a busy
			// machine), the agent makes a profile every 0.5 s; backing off
			// from 0.5 s doubling, at most about 5 attempts in 6 s.
			for deadline := time.Now().Add(60 * time.Second); callsNow() == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("setup: the agent never reached the server; stderr:\n%s", stderr.String())
				}
			}
			first := callsNow()
			time.Sleep(6 * time.Second)
			if calls := callsNow() - first; calls > 8 {
				t.Errorf("%d attempts in 6 s after the first: the agent does not back off", calls)
			}
			agentCmd.Process.Signal(syscall.SIGTERM)
			agentCmd.Wait()
			if n := strings.Count(stderr.String(), c.say); n != 1 {
				t.Errorf("said %q %d times, want once:\n%s", c.say, n, stderr.String())
			}
		})
	}
}

// TestAgentWallProfile: with --profile cpu,wall the agent pushes both a
// CPU profile (process_cpu) and a wall-clock one (wall) of each process,
// with either sampler (--ebpf: the time off a CPU from sched_switch).
// A program that computes half its wall time and sleeps the other half, by
// its own clock, shows that split in the wall profile, and next to no
// sleep in the CPU profile.
func TestAgentWallProfile(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	srv := &fakePyroscope{t: t}
	srv.start()
	defer srv.stop()
	for _, sampler := range []string{"user-space", "ebpf"} {
		t.Run(sampler, func(t *testing.T) { testAgentWallProfile(t, rb, srv, sampler == "ebpf") })
	}
}

func testAgentWallProfile(t *testing.T, rb testruby.Ruby, srv *fakePyroscope, ebpf bool) {
	marker := fmt.Sprintf("wallmark%d", time.Now().UnixNano())
	prog, read := startSleepHalf(t, rb, marker)
	read()
	args := []string{"agent", "--server", "http://" + srv.addr, "--match", marker,
		"--upload-interval", "1s", "--rate", "100", "--profile", "cpu,wall"}
	if ebpf {
		args = append(args, "--ebpf")
	}
	agentCmd := exec.Command(rbscopeBin, args...)
	agentErr := &lockedBuffer{}
	agentCmd.Stderr = agentErr
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { agentCmd.Process.Kill(); agentCmd.Wait() }()
	pid := strconv.Itoa(prog.Process.Pid)
	mine := func(rs []received, clock string) []received {
		var out []received
		for _, r := range rs {
			if r.labels["pid"] == pid && r.clock == clock {
				out = append(out, r)
			}
		}
		return out
	}
	srv.waitFor(time.Now(), "a CPU and a wall profile of the program", func(rs []received) bool {
		return len(mine(rs, "cpu")) > 0 && len(mine(rs, "wall")) > 0
	})
	// Profiles from here on cover the program's split as measured from
	// here on (it holds still: both halves are set by its own clock).
	from, before := time.Now(), read()
	var wall, cpu [2]int64 // samples holding compute, nap
	for deadline := time.Now().Add(90 * time.Second); wall[0]+wall[1] < 600; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d wall samples of the program in 90 s; agent:\n%s", wall[0]+wall[1], agentErr.String())
		}
		wall, cpu = [2]int64{}, [2]int64{}
		for _, r := range mine(srv.since(from), "wall") {
			wall[0], wall[1] = wall[0]+r.counts["Object#compute"], wall[1]+r.counts["Object#nap"]
		}
		for _, r := range mine(srv.since(from), "cpu") {
			cpu[0], cpu[1] = cpu[0]+r.counts["Object#compute"], cpu[1]+r.counts["Object#nap"]
		}
	}
	after := read()
	wantNap := 100 * (after.Nap - before.Nap) / (after.Nap - before.Nap + after.Compute - before.Compute)
	n := float64(wall[0] + wall[1])
	gotNap := 100 * float64(wall[1]) / n
	tol := math.Max(5, 100*teststat.Share(wantNap/100, n, 1))
	t.Logf("wall profile: nap %.1f%% of %.0f samples; the program measured %.1f%% of its wall time asleep; CPU profile: %d compute, %d nap samples",
		gotNap, n, wantNap, cpu[0], cpu[1])
	if math.Abs(gotNap-wantNap) > tol {
		t.Errorf("the wall profile has nap in %.1f%% of samples, the program slept %.1f%% of its wall time (±%.1f)", gotNap, wantNap, tol)
	}
	if cpu[0] == 0 || cpu[1]*10 > cpu[0] {
		t.Errorf("the CPU profile holds %d samples of compute and %d of nap: sleep is not CPU time", cpu[0], cpu[1])
	}
}

// TestAgentEBPF is TestRecordKnownSplit for agent --ebpf: the CPU profiles
// the agent pushes of the split workload give each chain the share of the
// samples that the program measured of its own CPU time, within the same
// tolerance, beside two CPU spinners, alone and sharing one CPU with a
// further spinning process; they carry the labels the user-space sampler's
// do. Options the BPF sampler cannot honour are refused (exit 2).
func TestAgentEBPF(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	for _, tc := range []struct{ flag, want string }{
		{"--pause", "--pause cannot be used with --ebpf"},
	} {
		_, stderr, code := rbscope(t, "agent", "--ebpf", "--server", "http://127.0.0.1:9", tc.flag)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("agent --ebpf %s: exit %d, stderr %q; want exit 2 and one line saying %q", tc.flag, code, stderr, tc.want)
		}
	}
	testruby.Spinners(t, 2)
	srv := &fakePyroscope{t: t}
	srv.start()
	defer srv.stop()
	version, _ := exec.Command(rb.Bin, "-e", "print RUBY_VERSION").Output()
	for _, shared := range []bool{false, true} {
		var agentCmd *exec.Cmd
		agentErr := &lockedBuffer{}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		metricsAddr := ln.Addr().String()
		ln.Close()
		checkKnownSplit(t, rb, shared, "agent --ebpf", 2*splitChains, func(pid int) string {
			if agentCmd == nil {
				var exited <-chan struct{}
				agentCmd, exited = startRbscope(t, nil, agentErr, "agent", "--ebpf", "--server", "http://"+srv.addr, "--pid", strconv.Itoa(pid),
					"--upload-interval", "1s", "--rate", "1000", "--metrics-addr", metricsAddr)
				// The first profile: the sampler is loaded and running.
				first := time.Now()
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					checkRuns(t, "the agent", exited, agentErr)
					if rs := srv.since(first); len(rs) > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no profile within 60 s; agent:\n%s", agentErr.String())
					}
				}
				if !strings.Contains(agentErr.String(), "(BPF sampler)") {
					t.Errorf("the agent does not say it samples with the BPF sampler:\n%s", agentErr.String())
				}
			}
			// The profiles of one 3-second window, as collapsed stacks of
			// the chains' counts.
			from := time.Now()
			time.Sleep(3 * time.Second)
			var out strings.Builder
			for _, r := range srv.since(from) {
				if r.labels["pid"] != strconv.Itoa(pid) {
					continue
				}
				want := map[string]string{"__name__": "process_cpu", "service_name": "split", "process.runtime.name": "ruby", "process.runtime.version": string(version)}
				for k, v := range want {
					if r.labels[k] != v {
						t.Errorf("label %s = %q, want %q (labels %v)", k, r.labels[k], v, r.labels)
					}
				}
				for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
					fmt.Fprintf(&out, "Object#%s (pushed) %d\n", c, r.counts["Object#"+c])
				}
			}
			return out.String()
		})
		if agentCmd == nil {
			continue
		}
		// checkKnownSplit killed the workload: the agent lets it go.
		waitProcesses(t, metricsAddr, 0, 30*time.Second, "after the workload was killed", agentErr)
	}
}

// TestAgentFollowsHotRestart: a server's hot restart (Puma's SIGUSR2:
// exec in place) leaves another program at the PID the agent samples,
// with none of its reads failing to say so. The agent, with either
// sampler, lets the old program go and profiles the new one: a profile of
// the PID with the new program's method comes, and none after it with the
// old program's.
func TestAgentFollowsHotRestart(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	srv := &fakePyroscope{t: t}
	srv.start()
	defer srv.stop()
	for _, sampler := range []string{"user-space", "ebpf"} {
		t.Run(sampler, func(t *testing.T) {
			work := startHotRestart(t, rb)
			pid := strconv.Itoa(work.Process.Pid)
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			metricsAddr := ln.Addr().String()
			ln.Close()
			args := []string{"agent", "--server", "http://" + srv.addr, "--pid", pid, "--upload-interval", "1s", "--rate", "100", "--metrics-addr", metricsAddr}
			if sampler == "ebpf" {
				args = append(args, "--ebpf")
			}
			agentErr := &lockedBuffer{}
			_, exited := startRbscope(t, nil, agentErr, args...)
			holding := func(since time.Time, fn string) []received {
				var rs []received
				for _, r := range srv.since(since) {
					if r.labels["pid"] == pid && r.functions[fn] {
						rs = append(rs, r)
					}
				}
				return rs
			}
			waitHolding := func(since time.Time, fn string) received {
				t.Helper()
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					checkRuns(t, "the agent", exited, agentErr)
					if rs := holding(since, fn); len(rs) > 0 {
						return rs[0]
					}
					if time.Now().After(deadline) {
						t.Fatalf("no profile of pid %s holding %s within 60 s; agent:\n%s", pid, fn, agentErr.String())
					}
				}
			}
			start := time.Now()
			waitHolding(start, "Object#work_before")
			if err := work.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			after := waitHolding(start, "Object#work_after")
			if old := holding(after.at, "Object#work_before"); len(old) > 0 {
				t.Errorf("%d profiles of the old program after the new one's first (labels %v)", len(old), old[0].labels)
			}
			waitProcesses(t, metricsAddr, 1, 30*time.Second, "after the restart", agentErr)
		})
	}
}
