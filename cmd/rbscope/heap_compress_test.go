package main

import (
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

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/testruby"
)

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
// refused in one line; core --heap-dump compresses too.
func TestHeapDumpCompressed(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	p := testruby.Start(t, rb, "heap_dump.rb", nil, filepath.Join(dir, "ruby.json"))
	var rep struct {
		Known map[string]string `json:"known"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
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
		{"heap", "path", "DUMP", rep.Known["path_target"]},
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
			for _, args := range [][]string{{"heap", "top", cut}, {"heap", "diff", plain, cut}, {"heap", "path", cut, rep.Known["path_target"]}} {
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

// TestHeapDumpCompressionRefused: an output named for a compression
// rbscope does not write, or for two, is a usage error of one line,
// before the process is touched and with nothing written.
func TestHeapDumpCompressionRefused(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	target := exec.Command(rb.Bin, "-e", "sleep")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	dir := t.TempDir()
	for _, c := range []struct{ name, want string }{
		{"heap.jsonl.xz", "not .xz"},
		{"heap.jsonl.bz2", "not .bz2"},
		{"heap.jsonl.zstd", "not .zstd"},
		{"heap.jsonl.gz.zst", "two compression suffixes"},
		{"heap.jsonl.zst.gz", "two compression suffixes"},
	} {
		out := filepath.Join(dir, c.name)
		for _, args := range [][]string{
			{"heap", "dump", "-p", fmt.Sprint(target.Process.Pid), "-o", out},
			{"core", filepath.Join(dir, "no-such-core"), "--heap-dump", "-o", out},
		} {
			stdout, stderr, code := rbscope(t, args...)
			if code != 2 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, c.want) {
				t.Errorf("%s -o %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", args[0], c.name, code, stdout, stderr, c.want)
			}
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files written: %v", ents)
	}
	if st := processState(t, target.Process.Pid); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}
}
