package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

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
	p, known := startHeapDumpProgram(t, rb, dir)
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

	stdout, stderr, code := rbscope(t, "heap", "path", out, known["path_target"], "--json")
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
		if !strings.Contains(strings.Join(chain, " "), known[k]) {
			t.Errorf("path %v lacks %s %s", chain, k, known[k])
		}
	}

	stdout, stderr, code = rbscope(t, "heap", "top", out, "--top", "200", "--json")
	if code != 0 {
		t.Fatalf("top: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, known["hash_of_arrays"]) {
		t.Errorf("heap top does not list the hash of arrays %s among 200 retainers", known["hash_of_arrays"])
	}
}

// startHeapDumpProgram starts testdata/heap_dump.rb on rb, its own
// dump_all written to dir/ruby.json, and returns it once it has reported,
// with the addresses of the objects it knows by name.
func startHeapDumpProgram(t *testing.T, rb testruby.Ruby, dir string) (*testruby.Process, map[string]string) {
	t.Helper()
	p := testruby.Start(t, rb, "heap_dump.rb", nil, filepath.Join(dir, "ruby.json"))
	var rep struct {
		Known map[string]string `json:"known"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	return p, rep.Known
}

// TestHeapDumpErrors: bad usage, an output that cannot be written, and
// one named for a compression rbscope does not write (heap dump's and core
// --heap-dump's), refused before the process is touched.
func TestHeapDumpErrors(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	target := exec.Command(rb.Bin, "-e", "sleep")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	pid := fmt.Sprint(target.Process.Pid)
	missing := filepath.Join(t.TempDir(), "no such dir", "heap.json")
	outDir := t.TempDir() // nothing is written there
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
		{"another compressor", []string{"heap", "dump", "-p", pid, "-o", filepath.Join(outDir, "heap.jsonl.xz")}, 2, "not .xz: name the file .jsonl, .jsonl.zst or .jsonl.gz"},
		{"zstd's long suffix", []string{"heap", "dump", "-p", pid, "-o", filepath.Join(outDir, "heap.jsonl.zstd")}, 2, "not .zstd"},
		{"two compressions", []string{"heap", "dump", "-p", pid, "-o", filepath.Join(outDir, "heap.jsonl.gz.zst")}, 2, "two compression suffixes (.gz.zst)"},
		{"core, two compressions", []string{"core", filepath.Join(outDir, "no-core"), "--heap-dump", "-o", filepath.Join(outDir, "heap.jsonl.zst.gz")}, 2, "two compression suffixes (.zst.gz)"},
		{"core, another compressor", []string{"core", filepath.Join(outDir, "no-core"), "--heap-dump", "-o", filepath.Join(outDir, "heap.jsonl.bz2")}, 2, "not .bz2"},
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
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Errorf("files written: %v", ents)
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

// decompressed returns the bytes of the dump at path, decompressed by the
// compressor's own reader as its suffix says (not through heap.Open).
func decompressed(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(path, ".zst"):
		d, err := zstd.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r = d
	case strings.HasSuffix(path, ".gz"):
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = z
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

// TestHeapDumpCompressed: heap dump -o *.zst and *.gz write the dump a
// plain one of the same standing process is, compressed (its lines, read
// by zstd's and gzip's own readers); every reader command reads them as
// it reads the plain one, whatever the file's name; cut short, each is
// refused in one line (TestCoreHeapDump writes a core's dump compressed).
func TestHeapDumpCompressed(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	p, known := startHeapDumpProgram(t, rb, dir)
	pid := fmt.Sprint(p.PID())
	plain, zst, gz := filepath.Join(dir, "heap.jsonl"), filepath.Join(dir, "heap.jsonl.zst"), filepath.Join(dir, "heap.jsonl.gz")
	for _, c := range []struct{ path, size string }{
		{plain, `\d+ bytes`},
		{zst, `\d+ bytes, \d+ as zstd \([0-9.]+x smaller\)`},
		{gz, `\d+ bytes, \d+ as gzip \([0-9.]+x smaller\)`},
	} {
		_, stderr, code := rbscope(t, "heap", "dump", "-p", pid, "-o", c.path)
		if code != 0 {
			t.Fatalf("heap dump -o %s: exit %d: %s", c.path, code, stderr)
		}
		want := `^rbscope: wrote ` + regexp.QuoteMeta(c.path) + `: \d+ objects and \d+ roots of pid \d+ \(Ruby [0-9.]+\), ` + c.size + `; paused `
		if !regexp.MustCompile(want).MatchString(stderr) {
			t.Errorf("stderr %q, want %s", stderr, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 4 {
		t.Errorf("%d files in the dump's directory, want the report and the three dumps alone", len(ents))
	}
	// The program stands still, its GC off: the same lines in each.
	lines := func(path string) []string {
		l := strings.Split(string(decompressed(t, path)), "\n")
		slices.Sort(l)
		return l
	}
	want := lines(plain)
	if len(want) < 10000 {
		t.Fatalf("setup: %d lines in the plain dump", len(want))
	}
	for _, path := range []string{zst, gz} {
		if b, _ := os.ReadFile(path); len(b) == 0 || heap.Sniff(b) == heap.Plain {
			t.Errorf("%s is not compressed", path)
		}
		if got := lines(path); !slices.Equal(got, want) {
			t.Errorf("%s: %d lines, differing from the plain dump's %d", path, len(got), len(want))
		}
	}

	// Every reader, on the compressed dumps and on copies whose names
	// say nothing of their compression: the answers of the plain dump.
	named := func(out, path string) string { return strings.ReplaceAll(out, path, "DUMP") }
	anon := filepath.Join(dir, "zst-named.json")
	if err := os.WriteFile(anon, mustRead(t, zst), 0o600); err != nil {
		t.Fatal(err)
	}
	plainCopy := filepath.Join(dir, "plain-copy.jsonl")
	if err := os.WriteFile(plainCopy, mustRead(t, plain), 0o600); err != nil {
		t.Fatal(err)
	}
	anonGz := filepath.Join(dir, "gz-named.json")
	if err := os.WriteFile(anonGz, mustRead(t, gz), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"heap", "top", "DUMP", "--top", "20"},
		{"heap", "top", "DUMP", "--json"},
		{"heap", "path", "DUMP", known["path_target"]},
		{"heap", "diff", plain, "DUMP"},
		{"heap", "diff", "DUMP", plain, "--json"},
		{"heap", "suspects", plain, "DUMP"},
	} {
		run := func(path string) string {
			a := slices.Clone(args)
			for i := range a {
				if a[i] == "DUMP" {
					a[i] = path
				}
			}
			stdout, stderr, code := rbscope(t, a...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", a, code, stderr)
			}
			return named(stdout, path)
		}
		wantOut := run(plainCopy)
		for _, path := range []string{zst, gz, anon, anonGz} {
			if got := run(path); got != wantOut {
				t.Errorf("%v on %s differs from the plain dump's:\n%s\nplain:\n%s", args, filepath.Base(path), first(strings.Split(got, "\n"), 8), first(strings.Split(wantOut, "\n"), 8))
			}
		}
	}

	// Cut short anywhere: refused in one line, never read as a smaller
	// heap.
	for _, path := range []string{zst, gz} {
		whole := mustRead(t, path)
		cut := filepath.Join(dir, "cut-"+filepath.Base(path))
		for _, n := range []int{len(whole) - 1, len(whole) / 2, len(whole) / 10} {
			if err := os.WriteFile(cut, whole[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"heap", "top", cut}, {"heap", "diff", plain, cut}, {"heap", "path", cut, known["path_target"]}} {
				stdout, stderr, code := rbscope(t, args...)
				if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "stream is cut short") {
					t.Errorf("%v, cut at %d of %d bytes: exit %d, stdout %q, stderr %q; want exit 1 and one line saying it is cut short", args[:2], n, len(whole), code, stdout, stderr)
				}
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
