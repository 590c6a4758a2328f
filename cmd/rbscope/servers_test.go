package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heap/heaptest"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// selfReport is what a server process says of itself
// (testdata/servers/selfreport.rb).
type selfReport struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	Role    string `json:"role"`
	Title   string `json:"title"`
	Gen     int    `json:"gen"`
	Tick    int    `json:"tick"`
	Threads []struct {
		Name *string `json:"name"`
		TID  int     `json:"tid"`
		Main bool    `json:"main"`
	} `json:"threads"`
}

// server is a server under test: its master (or only) process, the
// directory its processes report into, and its HTTP port (0 for none).
type server struct {
	kind   string
	cmd    *exec.Cmd
	dir    string
	port   int
	marker string
	log    *lockedBuffer
}

// needCommand fails or skips the test when a program make deps installs is
// missing.
func needCommand(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			testruby.Missing(t, "%s is not installed (make deps installs it)", n)
		}
	}
}

// freePort returns a loopback TCP port free at the time of the call.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startGroup starts cmd in a process group of its own, which is killed
// when the test ends (the server's workers with it).
func startGroup(t *testing.T, cmd *exec.Cmd) *lockedBuffer {
	t.Helper()
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return log
}

// startForking starts a forking server ("puma" in cluster mode or
// "unicorn", two workers each, the application preloaded) on a fresh
// port, and waits until its master and both workers have reported and
// the application answers.
func startForking(t *testing.T, kind string) *server {
	t.Helper()
	needCommand(t, kind)
	dir := t.TempDir()
	s := &server{kind: kind, dir: dir, port: freePort(t), marker: fmt.Sprintf("rbscopesrv%d", time.Now().UnixNano())}
	switch kind {
	case "puma":
		s.cmd = exec.Command("puma", "-C", testruby.Testdata("servers/puma.rb"))
	case "unicorn":
		// The marker is in the command line (a load path of no use),
		// which the workers' titles repeat, for the agent's --match.
		s.cmd = exec.Command("unicorn", "-c", testruby.Testdata("servers/unicorn.rb"), "-E", "production",
			"-I", filepath.Join(dir, s.marker), testruby.Testdata("servers/config.ru"))
	}
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(s.port), "RBSCOPE_REPORT_DIR="+dir, "SERVER_TAG="+s.marker)
	s.log = startGroup(t, s.cmd)
	s.waitWorkers(t, 2, nil)
	s.waitReport(t, s.master())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := s.get("/pid"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: %s does not answer on port %d; output:\n%s", kind, s.port, s.log.String())
		}
	}
	return s
}

func (s *server) master() int { return s.cmd.Process.Pid }

// get fetches a path of the application and returns the answering pid.
func (s *server) get(path string) (int, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// load requests path from n clients in a loop until stop is called, which
// returns how many requests were answered.
func (s *server) load(n int, path string) (stop func() int) {
	var done atomic.Bool
	var ok atomic.Int64
	var wg sync.WaitGroup
	// A connection a request of its own, so that every worker gets some
	// (a kept-alive connection stays with one).
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path))
				if err != nil {
					time.Sleep(10 * time.Millisecond) // a worker killed mid-request
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok.Add(1)
			}
		}()
	}
	return func() int {
		done.Store(true)
		wg.Wait()
		return int(ok.Load())
	}
}

// reports reads the reports of the server's processes still running.
func (s *server) reports(t *testing.T) map[int]selfReport {
	t.Helper()
	out := map[int]selfReport{}
	paths, _ := filepath.Glob(filepath.Join(s.dir, "*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var r selfReport
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("report %s: %v", p, err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", r.PID)); err == nil && !processZombie(r.PID) {
			out[r.PID] = r
		}
	}
	return out
}

// processZombie reports whether pid has exited but is not yet reaped.
func processZombie(pid int) bool { return procfs.Exited(pid) }

// waitReport waits for pid's report.
func (s *server) waitReport(t *testing.T, pid int) selfReport {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, ok := s.reports(t)[pid]; ok {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: no report from pid %d; output:\n%s", pid, s.log.String())
		}
	}
}

// freshReport waits for a report of pid made by a look that began after
// the call: the report read now has tick T, so tick T+1 is not yet written
// and the look that writes T+2 starts after this moment.
func (s *server) freshReport(t *testing.T, pid int) selfReport {
	t.Helper()
	now := s.waitReport(t, pid)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r := s.waitReport(t, pid); r.Tick >= now.Tick+2 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: pid %d's report stopped at tick %d; output:\n%s", pid, now.Tick, s.log.String())
		}
	}
}

// waitWorkers waits until n workers of the master (none of those in old)
// have reported, and returns their reports by pid order.
func (s *server) waitWorkers(t *testing.T, n int, old map[int]bool) []selfReport {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ws []selfReport
		for _, r := range s.reports(t) {
			if r.Role == "worker" && r.PPID == s.master() && !old[r.PID] {
				ws = append(ws, r)
			}
		}
		if len(ws) >= n {
			sort.Slice(ws, func(i, j int) bool { return ws[i].PID < ws[j].PID })
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: %d of %d new workers reported; output:\n%s", len(ws), n, s.log.String())
		}
	}
}

// stackThread is a thread of stack --json.
type stackThread struct {
	Name   string       `json:"name"`
	TID    int          `json:"tid"`
	Main   bool         `json:"main"`
	Frames []stackFrame `json:"frames"`
}

// stackFrame is a frame of stack --json.
type stackFrame struct {
	Kind, Label, Path string
	Line              int
}

// catchPumaFrame reads pid's stacks (stack --json) until a Puma server
// thread ("puma srv tp ...") runs a frame match accepts, at most 100
// times; where names what is looked for.
func catchPumaFrame(t *testing.T, pid, where string, match func(stackFrame) bool) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, stderr, code := rbscope(t, "stack", "-p", pid, "--json")
		if code != 0 {
			t.Fatalf("stack: exit %d: %s", code, stderr)
		}
		var doc struct {
			Threads []stackThread `json:"threads"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		for _, th := range doc.Threads {
			for _, f := range th.Frames {
				if strings.HasPrefix(th.Name, "puma srv tp ") && match(f) {
					t.Logf("read %d: thread %q runs %s (%s:%d)", attempt, th.Name, f.Label, f.Path, f.Line)
					return
				}
			}
		}
		if attempt == 100 {
			t.Fatalf("no Puma thread in %s in %d reads:\n%.3000s", where, attempt, out)
		}
	}
}

// checkSelf runs stack --json and threads --json on pid, and compares the
// threads they read with the process's own report: the thread names, the
// TIDs of all but the main thread (whose TID in Ruby's books is its
// parent's in a forked worker, where rbscope gives the kernel's, the pid),
// and that some thread runs a frame labelled want. The comparison is made
// when the report held still from before both reads to a look begun after
// them.
func (s *server) checkSelf(t *testing.T, pid int, want string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		before := s.waitReport(t, pid)
		stackOut, stderr, code := rbscope(t, "stack", "-p", strconv.Itoa(pid), "--json")
		if code != 0 {
			t.Fatalf("stack -p %d: exit %d: %s", pid, code, stderr)
		}
		threadsOut, stderr, code := rbscope(t, "threads", "-p", strconv.Itoa(pid), "--json")
		if code != 0 {
			t.Fatalf("threads -p %d: exit %d: %s", pid, code, stderr)
		}
		after := s.freshReport(t, pid)
		if before.Gen != after.Gen || len(before.Threads) != len(after.Threads) {
			if attempt == 10 {
				t.Fatalf("pid %d: its thread list changed across every read", pid)
			}
			continue
		}
		var stack struct {
			Threads []stackThread `json:"threads"`
		}
		if err := json.Unmarshal([]byte(stackOut), &stack); err != nil {
			t.Fatalf("stack --json: %v", err)
		}
		var table struct {
			Threads []wire.ThreadRow `json:"threads"`
		}
		if err := json.Unmarshal([]byte(threadsOut), &table); err != nil {
			t.Fatalf("threads --json: %v", err)
		}
		var wantNames, stackNames, tableNames []string
		wantTIDs := map[int]string{}
		for _, th := range after.Threads {
			name := ""
			if th.Name != nil {
				name = *th.Name
			}
			wantNames = append(wantNames, name)
			if !th.Main {
				wantTIDs[th.TID] = name
			}
		}
		found := false
		for _, th := range stack.Threads {
			stackNames = append(stackNames, th.Name)
			if th.Main && th.TID != pid {
				t.Errorf("pid %d: stack gives the main thread tid %d, want the pid", pid, th.TID)
			}
			if !th.Main && wantTIDs[th.TID] != th.Name {
				t.Errorf("pid %d: stack's thread %q tid %d; the process says %q has it", pid, th.Name, th.TID, wantTIDs[th.TID])
			}
			if len(th.Frames) == 0 {
				t.Errorf("pid %d: thread %q has no frames", pid, th.Name)
			}
			for _, f := range th.Frames {
				found = found || f.Label == want
			}
		}
		mainRow := false
		for _, r := range table.Threads {
			if r.Kind != "ruby" || r.Ruby == nil {
				continue
			}
			tableNames = append(tableNames, r.Ruby.Name)
			if r.Ruby.Main {
				mainRow = r.TID == pid
			} else if wantTIDs[r.TID] != r.Ruby.Name {
				t.Errorf("pid %d: threads' row tid %d %q; the process says %q has it", pid, r.TID, r.Ruby.Name, wantTIDs[r.TID])
			}
		}
		sort.Strings(wantNames)
		sort.Strings(stackNames)
		sort.Strings(tableNames)
		if !slices.Equal(stackNames, wantNames) {
			t.Errorf("pid %d (%s): stack's threads %q, Thread.list says %q", pid, after.Title, stackNames, wantNames)
		}
		if !slices.Equal(tableNames, wantNames) {
			t.Errorf("pid %d (%s): threads' Ruby threads %q, Thread.list says %q", pid, after.Title, tableNames, wantNames)
		}
		if !mainRow {
			t.Errorf("pid %d: threads has no main-thread row at tid %d:\n%s", pid, pid, threadsOut)
		}
		if !found {
			t.Errorf("pid %d: no thread runs %s:\n%s", pid, want, stackOut)
		}
		t.Logf("pid %d (%s): %d threads match the process's own list", pid, after.Title, len(wantNames))
		return
	}
}

// checkNativeMain runs stack --native --json on a forked worker: its main
// thread is the Ruby thread at the kernel's TID (the pid), with native
// frames and Ruby frames, and no thread is listed twice.
func checkNativeMain(t *testing.T, pid int) {
	t.Helper()
	out, stderr, code := rbscope(t, "stack", "-p", strconv.Itoa(pid), "--native", "--json")
	if code != 0 {
		t.Fatalf("stack --native: exit %d: %s", code, stderr)
	}
	var doc wire.NativeStack
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stack --native --json: %v", err)
	}
	seen := map[int]int{}
	for _, th := range doc.Threads {
		seen[th.TID]++
		if !th.Main {
			continue
		}
		kinds := map[string]int{}
		for _, f := range th.Frames {
			kinds[f.Kind]++
		}
		if th.TID != pid || !th.Ruby || kinds["native"] == 0 || kinds["ruby"] == 0 {
			t.Errorf("worker %d: main thread tid %d ruby %v with frames by kind %v; want tid %d, native and Ruby frames", pid, th.TID, th.Ruby, kinds, pid)
		}
	}
	for tid, n := range seen {
		if n > 1 {
			t.Errorf("worker %d: tid %d listed %d times", pid, tid, n)
		}
	}
}

// rootFrames counts the samples of collapsed stacks by root frame.
func rootFrames(collapsed string) map[string]int {
	out := map[string]int{}
	eachCollapsed(collapsed, func(stack string, n int) {
		root, _, _ := strings.Cut(stack, ";")
		out[root] += n
	})
	return out
}

// samplesWith counts the samples of collapsed stacks that hold a frame
// containing sub.
func samplesWith(collapsed, sub string) (with, total int) {
	eachCollapsed(collapsed, func(stack string, n int) {
		total += n
		if strings.Contains(stack, sub) {
			with += n
		}
	})
	return with, total
}

// eachCollapsed calls fn with each line of a collapsed profile: its stack
// (the frames joined by ';') and its count; lines without a count are
// passed over.
func eachCollapsed(collapsed string, fn func(stack string, n int)) {
	sc := bufio.NewScanner(strings.NewReader(collapsed))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if n, err := strconv.Atoi(line[i+1:]); err == nil {
			fn(line[:i], n)
		}
	}
}

// attachedBy waits until the recorder holds pid's memory open: it has
// attached to it.
func attachedBy(t *testing.T, pid, recorder int, what string) {
	t.Helper()
	mem := fmt.Sprintf("/proc/%d/mem", pid)
	fdDir := fmt.Sprintf("/proc/%d/fd", recorder)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir(fdDir)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && l == mem {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder never attached to %s (pid %d)", what, pid)
		}
	}
}

// tracedBy waits until the TracerPid of pid's main thread is a thread of
// tracer at some poll: the recorder stops it for a sample (with --idle
// every tick).
func tracedBy(t *testing.T, pid, tracer int, what string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Microsecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		_, rest, _ := strings.Cut(string(b), "TracerPid:\t")
		field, _, _ := strings.Cut(rest, "\n")
		if tid, err := strconv.Atoi(field); err == nil && tid > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", tracer, tid)); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder never sampled %s (pid %d)", what, pid)
		}
	}
}

// titleIn reports whether collapsed stacks have a root frame naming pid
// and (the start of) its title.
func titleIn(roots map[string]int, pid int, title string) bool {
	if len(title) > 60 {
		title = title[:60]
	}
	prefix := "pid " + strconv.Itoa(pid) + " (" + title
	for r, n := range roots {
		if strings.HasPrefix(r, prefix) && n > 0 {
			return true
		}
	}
	return false
}

// leakLine is the line of testdata/servers/app.rb marked "leak site".
func leakLine(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "# leak site") {
			return i + 1
		}
	}
	t.Fatalf("%s has no leak site", file)
	return 0
}

// TestForkingServers runs Puma in cluster mode and Unicorn, each with two
// workers forked from a master that preloaded the application, and checks
// rbscope on them as a user runs it: stack and threads on the master and
// each worker against the threads each process reports of itself; record
// --subprocesses on the master, naming each process by pid and title and
// following a worker killed and forked again mid-recording; alloc on a
// worker naming the application's leaking line first; and the agent
// finding every process, each profile labelled with its pid and title.
func TestForkingServers(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to trace the servers' processes")
	}
	for _, kind := range []string{"puma", "unicorn"} {
		t.Run(kind, func(t *testing.T) {
			s := startForking(t, kind)
			workers := s.waitWorkers(t, 2, nil)
			masterFrame, workerFrame := "Puma::Cluster#run", "Puma::Cluster::Worker#run"
			if kind == "unicorn" {
				masterFrame, workerFrame = "Unicorn::HttpServer#join", "Unicorn::HttpServer#worker_loop"
			}
			t.Run("stack+threads", func(t *testing.T) {
				s.checkSelf(t, s.master(), masterFrame)
				for _, w := range workers {
					s.checkSelf(t, w.PID, workerFrame)
				}
				checkNativeMain(t, workers[0].PID)
			})
			t.Run("record-subprocesses", func(t *testing.T) { s.recordFollowsRespawn(t) })
			t.Run("alloc", func(t *testing.T) { s.allocOnWorker(t) })
			t.Run("agent", func(t *testing.T) { s.agentLabelsWorkers(t) })
			t.Run("agent-ebpf", func(t *testing.T) { s.agentLabelsWorkers(t, "--ebpf") })
			t.Run("exec+heap", func(t *testing.T) { s.execAndHeapOnWorker(t) })
		})
	}
}

// execAndHeapOnWorker runs exec, heap census and heap dump on a worker:
// exec evaluates inside it (its pid and title are what it reports), the
// census counts as many live Strings as the worker's own
// ObjectSpace.count_objects within the churn between the two, and the dump
// reaches what the worker's own dump_all reaches.
func (s *server) execAndHeapOnWorker(t *testing.T) {
	w := s.waitWorkers(t, 1, nil)[0]
	pid := strconv.Itoa(w.PID)
	out, stderr, code := rbscope(t, "exec", "-p", pid, "--timeout", "60s", "[Process.pid, $0]")
	if want := fmt.Sprintf("[%d, %q]", w.PID, w.Title); code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("exec: exit %d, %q, want %s; stderr %s", code, out, want, stderr)
	}
	own, stderr, code := rbscope(t, "exec", "-p", pid, "--timeout", "60s", "ObjectSpace.count_objects[:T_STRING]")
	if code != 0 {
		t.Fatalf("exec count_objects: exit %d: %s", code, stderr)
	}
	strs, _ := strconv.Atoi(strings.TrimSpace(own))
	out, stderr, code = rbscope(t, "heap", "census", "-p", pid, "--json", "--all")
	if code != 0 {
		t.Fatalf("census: exit %d: %s", code, stderr)
	}
	got := censusCount(censusJSON(t, out), "STRING", "")
	if got < strs*9/10 || got > strs*11/10 {
		t.Errorf("census counts %d Strings, the worker's count_objects %d", got, strs)
	}
	// The worker dumps its own heap (ObjectSpace.dump_all, run by exec)
	// right before and right after rbscope does: what both its dumps
	// reach, rbscope's must reach.
	dir := t.TempDir()
	dumpAll := func(name string) *heap.Graph {
		path := filepath.Join(dir, name)
		code := fmt.Sprintf(`require "objspace"; File.open(%q, "w") { |f| ObjectSpace.dump_all(output: f) }; nil`, path)
		if _, stderr, rc := rbscope(t, "exec", "-p", pid, "--timeout", "60s", code); rc != 0 {
			t.Fatalf("exec dump_all: exit %d: %s", rc, stderr)
		}
		g, err := heap.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	before := dumpAll("before.json")
	dump := filepath.Join(dir, "rbscope.json")
	_, stderr, code = rbscope(t, "heap", "dump", "-p", pid, "-o", dump)
	if code != 0 {
		t.Fatalf("heap dump: exit %d: %s", code, stderr)
	}
	after := dumpAll("after.json")
	mine, err := heap.LoadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	reach := heaptest.Compare(mine, before, after)
	t.Logf("%s worker %d: census %d Strings (count_objects %d); %s; %v", s.kind, w.PID, got, strs, strings.TrimSpace(stderr), reach)
	if reach.Share() < heaptest.Share {
		t.Errorf("reached %.2f%% of what dump_all reaches, want >= %.0f%%", 100*reach.Share(), 100*heaptest.Share)
	}
}

// recordFollowsRespawn records the master with --subprocesses under load,
// kills a worker with SIGKILL once the recorder samples it, and ends the
// recording once the recorder samples the worker the master forks in its
// place: the output has a root frame for the master and for each of the
// three workers, each naming its pid and title.
func (s *server) recordFollowsRespawn(t *testing.T) {
	before := s.waitWorkers(t, 2, nil)
	stop := s.load(2, "/spin?ms=5")
	defer stop()
	out := filepath.Join(t.TempDir(), "rec.txt")
	rec := exec.Command(rbscopeBin, "record", "-p", strconv.Itoa(s.master()), "--subprocesses", "--idle", "--rate", "50", "-f", "collapsed", "-o", out)
	var recErr strings.Builder
	rec.Stderr = &recErr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer rec.Process.Kill()
	victim := before[0]
	attachedBy(t, victim.PID, rec.Process.Pid, "the worker to kill")
	tracedBy(t, victim.PID, rec.Process.Pid, "the worker to kill")
	attachedBy(t, before[1].PID, rec.Process.Pid, "the other worker")
	tracedBy(t, before[1].PID, rec.Process.Pid, "the other worker")
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	old := map[int]bool{before[0].PID: true, before[1].PID: true}
	fresh := s.waitWorkers(t, 1, old)[0]
	attachedBy(t, fresh.PID, rec.Process.Pid, "the worker forked in the killed one's place")
	tracedBy(t, fresh.PID, rec.Process.Pid, "the worker forked in the killed one's place")
	// A few samples more of the new worker: it is sampled at every tick
	// (--idle), and the recorder has just stopped it once.
	tracedBy(t, fresh.PID, rec.Process.Pid, "the new worker again")
	rec.Process.Signal(syscall.SIGINT)
	if err := rec.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 && ee.ExitCode() != 0 {
			t.Fatalf("record: %v; stderr %s", err, recErr.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("record wrote no output: %v; stderr %s", err, recErr.String())
	}
	roots := rootFrames(string(b))
	t.Logf("%s: root frames %v", s.kind, roots)
	masterTitle := strings.TrimSpace(strings.ReplaceAll(readFile(t, fmt.Sprintf("/proc/%d/cmdline", s.master())), "\x00", " "))
	if !titleIn(roots, s.master(), masterTitle) {
		t.Errorf("no root frame for the master pid %d (%s)", s.master(), masterTitle)
	}
	for _, w := range []selfReport{victim, before[1], fresh} {
		if !titleIn(roots, w.PID, w.Title) {
			t.Errorf("no root frame for worker pid %d (%s)", w.PID, w.Title)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// allocOnWorker traces a worker's allocations while a client requests the
// leaking path: the leaking line comes first, as Strings, each at least
// the 2 kB the application keeps.
func (s *server) allocOnWorker(t *testing.T) {
	w := s.waitWorkers(t, 2, nil)[0]
	stop := s.load(1, "/leak")
	stdout, stderr, code := rbscope(t, "alloc", "-p", strconv.Itoa(w.PID), "--duration", "2s", "--json", "--timeout", "60s")
	n := stop()
	if code != 0 {
		t.Fatalf("alloc: exit %d: %s", code, stderr)
	}
	_, sites := allocJSON(t, stdout)
	app := testruby.Testdata("servers/app.rb")
	line := leakLine(t, app)
	if len(sites) == 0 {
		t.Fatalf("alloc found nothing alive in pid %d after %d leaking requests", w.PID, n)
	}
	top := sites[0]
	if filepath.Clean(top.File) != filepath.Clean(app) || top.Line != line || top.Class != "String" || top.Count == 0 || top.Bytes < top.Count*2000 {
		t.Errorf("alloc's first site %+v, want %s:%d String, >= 2000 B each (of %d requests)", top, app, line, n)
	}
	t.Logf("%s worker %d: %d leaking requests in all; alloc's first site %s:%d %s x%d %d B", s.kind, w.PID, n, top.File, top.Line, top.Class, top.Count, top.Bytes)
}

// agentLabelsWorkers runs the agent with --match on the server's marker
// under load: it finds the master and both workers (its metrics count
// three processes) and pushes each worker's profile, holding the
// application's hot method, labelled with the worker's pid and title; with
// flags (--ebpf) too, skipped where the BPF sampler cannot run.
func (s *server) agentLabelsWorkers(t *testing.T, flags ...string) {
	workers := s.waitWorkers(t, 2, nil)
	stop := s.load(3, "/spin?ms=5")
	defer stop()
	srv := &fakePyroscope{t: t}
	srv.start()
	defer srv.stop()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	agentErr := &lockedBuffer{}
	_, exited := startRbscope(t, nil, agentErr, append([]string{"agent", "--server", "http://" + srv.addr, "--match", s.marker,
		"--upload-interval", "1s", "--rate", "50", "--metrics-addr", metricsAddr}, flags...)...)
	start := time.Now()
	// Running: it says where it pushes once it has started sampling.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(agentErr.String(), "pushing to"); time.Sleep(20 * time.Millisecond) {
		checkRuns(t, fmt.Sprintf("agent %v", flags), exited, agentErr)
		if time.Now().After(deadline) {
			t.Fatalf("the agent %v did not start in 30 s: %s", flags, agentErr.String())
		}
	}
	srv.waitFor(start, "profiles of both workers, each labelled with its title", func(rs []received) bool {
		ok := map[int]bool{}
		for _, w := range workers {
			for _, r := range rs {
				// A label value is cut at 128 bytes.
				title := r.labels["process.title"]
				if r.labels["pid"] == strconv.Itoa(w.PID) && len(title) >= min(len(w.Title), 100) && strings.HasPrefix(w.Title, title) && r.functions["ServerWork.hot"] {
					ok[w.PID] = true
				}
			}
		}
		return len(ok) == len(workers)
	})
	waitProcesses(t, metricsAddr, 3, 60*time.Second, "the master and its two workers", agentErr)
	titles := map[string]bool{}
	for _, r := range srv.since(start) {
		titles[r.labels["pid"]+" "+r.labels["process.title"]] = true
		if r.labels["service_name"] != s.kind {
			t.Errorf("service_name %q, want %q (labels %v)", r.labels["service_name"], s.kind, r.labels)
		}
	}
	t.Logf("%s: profiles by pid and title: %v", s.kind, titles)
}

// startSidekiq starts a redis-server of the test's own on a unix socket in
// a temporary directory, and Sidekiq with three processor threads running
// the jobs of jobs (a file under testdata, sidekiq_jobs.rb's SpinJob
// without end by default, as env sets in its environment), and waits for
// its report.
func startSidekiq(t *testing.T, jobs string, env ...string) *server {
	t.Helper()
	needCommand(t, "redis-server", "sidekiq")
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	redis := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir)
	redisLog := startGroup(t, redis)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: redis-server does not answer on %s:\n%s", sock, redisLog.String())
		}
	}
	s := &server{kind: "sidekiq", dir: dir}
	s.cmd = exec.Command("sidekiq", "-r", testruby.Testdata(jobs), "-c", "3")
	s.cmd.Dir = dir
	s.cmd.Env = append(append(os.Environ(), "REDIS_URL=unix://"+sock, "RBSCOPE_REPORT_DIR="+dir), env...)
	s.log = startGroup(t, s.cmd)
	s.waitReport(t, s.master())
	return s
}

// TestSidekiq runs Sidekiq with three processor threads on a Redis of the
// test's own: stack and threads against the process's own thread list;
// record finds the job's hot method on the processor threads, in most of
// the samples, as the job spends its time there by its own clock; exec
// evaluates inside the busy process.
func TestSidekiq(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to trace the server's process")
	}
	s := startSidekiq(t, "servers/sidekiq_jobs.rb", "SEED=3")
	t.Run("stack+threads", func(t *testing.T) { s.checkSelf(t, s.master(), "Sidekiq::Processor#run") })
	t.Run("record", func(t *testing.T) {
		// Windows of 3 s until there are 20 samples (at most 4): a busy
		// machine may give the jobs little CPU in one.
		var out string
		for try := 0; try < 4; try++ {
			o, stderr, code := rbscope(t, "record", "-p", strconv.Itoa(s.master()), "--threads", "--duration", "3s", "-f", "collapsed", "-o", "-")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			out += strings.TrimSuffix(o, "\n") + "\n"
			if _, total := samplesWith(out, ""); total >= 20 {
				break
			}
		}
		hot, total := samplesWith(out, "SpinJob#perform")
		onProcessor, _ := samplesWith(out, "thread processor;")
		if total < 20 || hot < total/2 {
			t.Errorf("SpinJob#perform in %d of %d samples:\n%.2000s", hot, total, out)
		}
		for root, n := range rootFrames(out) {
			if root != "thread processor" && n > total/4 {
				t.Errorf("thread %q has %d of %d samples: the processors run the jobs", root, n, total)
			}
		}
		t.Logf("sidekiq: SpinJob#perform in %d of %d samples; %d on processor threads", hot, total, onProcessor)
	})
	t.Run("exec", func(t *testing.T) {
		out, stderr, code := rbscope(t, "exec", "-p", strconv.Itoa(s.master()), "--timeout", "60s", `[Process.pid, Thread.list.count { |t| t.name == "processor" }]`)
		if want := fmt.Sprintf("[%d, 3]", s.master()); code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("exec: exit %d, %q, want %s; stderr %s", code, out, want, stderr)
		}
	})
}
