package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestHeapDumpCLI dumps testdata/heap_dump.rb's heap to a file and reads it
// back with heap path and heap top.
func TestHeapDumpCLI(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	p := testruby.Start(t, rb, "heap_dump.rb", nil, filepath.Join(dir, "ruby.json"))
	var rep struct {
		Known map[string]string `json:"known"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	out := filepath.Join(dir, "out", "rbscope.json")
	if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := rbscope(t, "heap", "dump", "-p", fmt.Sprint(p.PID()), "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `^rbscope: wrote ` + regexp.QuoteMeta(out) + `: \d+ objects and \d+ roots of pid \d+ \(Ruby [0-9.]+\), \d+ bytes; paused \d+ ms to copy \d+ MB, decoded in \S+\n$`
	if !regexp.MustCompile(want).MatchString(stderr) {
		t.Errorf("stderr %q, want %s", stderr, want)
	}
	if st := processState(t, p.PID()); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("output directory holds %d files, want the dump alone", len(ents))
	}
	g, err := heap.LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if g.Len() < 10000 {
		t.Errorf("%d objects in the dump", g.Len())
	}

	stdout, stderr, code := rbscope(t, "heap", "path", out, rep.Known["path_target"], "--json")
	if code != 0 {
		t.Fatalf("path: exit %d: %s", code, stderr)
	}
	var path struct {
		Paths []struct {
			Root string `json:"root"`
			Hops []struct {
				Address, Type, Class string
			} `json:"hops"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(stdout), &path); err != nil {
		t.Fatalf("path --json: %v\n%s", err, stdout)
	}
	if len(path.Paths) == 0 {
		t.Fatalf("no path to PathHolder::CONST[0][:target]:\n%s", stdout)
	}
	var chain []string
	for _, h := range path.Paths[0].Hops {
		chain = append(chain, h.Address)
	}
	for _, k := range []string{"path_module", "path_array", "path_hash", "path_target"} {
		if !strings.Contains(strings.Join(chain, " "), rep.Known[k]) {
			t.Errorf("path %v lacks %s %s", chain, k, rep.Known[k])
		}
	}

	stdout, stderr, code = rbscope(t, "heap", "top", out, "--top", "200", "--json")
	if code != 0 {
		t.Fatalf("top: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, rep.Known["hash_of_arrays"]) {
		t.Errorf("heap top does not list the hash of arrays %s among 200 retainers", rep.Known["hash_of_arrays"])
	}
}

// TestHeapDumpErrors: bad usage, and an output that cannot be written,
// refused before the process is touched.
func TestHeapDumpErrors(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	target := exec.Command(rb.Bin, "-e", "sleep")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	pid := fmt.Sprint(target.Process.Pid)
	missing := filepath.Join(t.TempDir(), "no such dir", "heap.json")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no pid", []string{"heap", "dump", "-o", "x.json"}, 2, "--pid is required"},
		{"no output", []string{"heap", "dump", "-p", pid}, 2, "--output FILE is required"},
		{"missing directory", []string{"heap", "dump", "-p", pid, "-o", missing}, 1, "cannot write " + missing + ": no such file or directory"},
		{"directory", []string{"heap", "dump", "-p", pid, "-o", t.TempDir()}, 1, "it is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := rbscope(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "goroutine") {
				t.Errorf("stderr %q, want one line containing %q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q on error", stdout)
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", target.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`(?m)^TracerPid:\s+0$`).Match(status) {
				t.Errorf("target still traced after the error")
			}
			if st := processState(t, target.Process.Pid); st == "t" || st == "T" {
				t.Errorf("target left stopped (state %s)", st)
			}
		})
	}
}

// busyRuby allocates and drops objects of every decoded type as fast as it
// can, in two threads.
const busyRuby = `
$keep = Array.new(2000)
def churn(seed)
  i = seed
  loop do
    i += 1
    k = i % $keep.size
    $keep[k] = case i % 5
      when 0 then "str #{i}" * (i % 7)
      when 1 then Array.new(i % 20) { |j| j.to_s }
      when 2 then { i => [i], "k#{i}" => "v" }
      when 3 then Struct.new(:a).new(i.to_s)
      else Object.new.tap { |o| o.instance_variable_set(:@x, [i]) }
    end
  end
end
Thread.new { churn(1) }
File.write(ARGV[0], "ready")
churn(0)
`

// TestHeapDumpNonblocking dumps a busy process without pausing it: the
// dump must end, name the torn objects it skipped, and be readable.
func TestHeapDumpNonblocking(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	busy := testruby.DieWithTest(exec.Command(rb.Bin, "-e", busyRuby, ready))
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy program never got ready")
		}
	}
	time.Sleep(300 * time.Millisecond) // let the heap grow and churn
	out := filepath.Join(dir, "busy.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rbscopeBin, "heap", "dump", "-p", fmt.Sprint(busy.Process.Pid), "-o", out, "--nonblocking")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rbscope heap dump --nonblocking: %v (%s)", err, stderr.String())
	}
	if !regexp.MustCompile(`; not paused \(took \S+\), \d+ objects skipped as torn`).MatchString(stderr.String()) {
		t.Errorf("stderr %q does not report the skipped objects", stderr.String())
	}
	g, err := heap.LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if g.Len() < 1000 {
		t.Errorf("%d objects in the dump of a busy process", g.Len())
	}
	t.Logf("%s; %d objects, %d dangling references", strings.TrimSpace(stderr.String()), g.Len(), g.Dangling)
	if st := processState(t, busy.Process.Pid); st == "t" || st == "T" {
		t.Errorf("target stopped (state %s)", st)
	}
}

// TestHeapDumpReadBudget: a process whose Arrays claim 128 GB of elements
// (testdata/heap_budget.rb) is dumped with a bounded number of reads, and
// the summary says the budget ran out.
func TestHeapDumpReadBudget(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	v, err := exec.Command(rb.Bin, "-e", "print RUBY_VERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	fam, err := rubyvm.Family(string(v))
	if err != nil {
		t.Fatal(err)
	}
	L := layouts.For(fam)
	if L == nil {
		t.Fatalf("no layout for Ruby %s", v)
	}
	p := testruby.Start(t, rb, "heap_budget.rb", nil, fmt.Sprint(L.RArrayHeapLen), fmt.Sprint(L.RArrayHeapPtr))
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 60*time.Second)
	out := filepath.Join(t.TempDir(), "dump.json")
	_, stderr, code := rbscope(t, "heap", "dump", "-p", fmt.Sprint(p.PID()), "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "read budget ran out") {
		t.Errorf("stderr %q does not say the read budget ran out", stderr)
	}
	if _, err := heap.LoadFile(out); err != nil {
		t.Errorf("the dump does not load: %v", err)
	}
}
