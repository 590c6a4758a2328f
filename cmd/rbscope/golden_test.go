package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testruby"
)

// updateGolden rewrites the golden files instead of comparing with them:
// go test ./cmd/rbscope -run TestGolden -update
var updateGolden = flag.Bool("update", false, "rewrite testdata/golden/ from what rbscope prints now")

// TestGolden runs commands on stored inputs (the peer cores, and a raw
// recording in testdata/golden) and compares what they print, byte for
// byte, with testdata/golden/: a change of code that changes no output it
// did not mean to leaves them equal. Binary outputs (pprof) and the heap
// dump itself are compared by their SHA-256; what varies from run to run
// (durations, the cores' unpacked paths) is masked first.
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	raw := testruby.Testdata("golden/demo.raw.gz")
	for _, f := range []string{"flamegraph", "speedscope", "collapsed", "summary", "summary-by-line", "callgrind", "raw", "firefox", "pprof"} {
		golden(t, "report-"+f, f == "pprof" || f == "raw", "report", "-i", raw, "-f", f, "-o", "-")
	}
	golden(t, "report-collapsed-nolineno", false, "report", "-i", raw, "-f", "collapsed", "--nolineno", "-o", "-")
	goldenCrashStore(t, dir)

	src := testruby.EnvOr("RBSCOPE_PEER_CORES", "/work/shared/peer-cores")
	names, _ := filepath.Glob(filepath.Join(src, "ruby-coredump-*.gz"))
	if len(names) == 0 {
		t.Skipf("no peer cores in %s (RBSCOPE_PEER_CORES)", src)
	}
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "ruby-coredump-"), ".gz")
		version = strings.TrimPrefix(version, "with-classes-")
		if version == "3.0.0" {
			continue // refused: no table (TestCorePeerCores checks the line)
		}
		t.Run(version, func(t *testing.T) {
			core := testruby.UnpackCore(t, name, filepath.Join(testruby.CoreCache(), "peer-cores"))
			p := "core-" + version
			// with nothing but the core: the cores that hold no string of
			// their Ruby's release (2.7.2, 3.1.0) have it proven from
			// their heap (TestCoreFromElsewhere)
			golden(t, p, false, "core", core)
			golden(t, p+"-json", false, "core", core, "--json")
			golden(t, p+"-census", false, "core", core, "--census", "--all")
			golden(t, p+"-native", false, "core", core, "--native")
			golden(t, p+"-native-json", false, "core", core, "--native", "--json")
			dump := filepath.Join(dir, version+".json")
			if _, stderr, code := rbscope(t, "core", core, "--heap-dump", "-o", dump); code != 0 {
				t.Fatalf("core --heap-dump: exit %d: %s", code, stderr)
			}
			golden(t, p+"-heap-dump-file", true, "-", dump)
			golden(t, p+"-heap-top", false, "heap", "top", dump)
			golden(t, p+"-heap-top-json", false, "heap", "top", dump, "--json")
			golden(t, p+"-heap-diff-self", false, "heap", "diff", dump, dump)
		})
	}
}

// goldenCrashStore runs crash list and crash show on a stored report of
// a real crash (a Ruby 3.4 that segfaulted in native code; its core left
// out), copied to a store of the handler's own permissions.
func goldenCrashStore(t *testing.T, dir string) {
	t.Helper()
	store := filepath.Join(dir, "crash-store")
	src := testruby.Testdata("golden/crash-store")
	ids, err := os.ReadDir(src)
	if err != nil || len(ids) == 0 {
		t.Fatalf("setup: no stored crash report in %s: %v", src, err)
	}
	id := ids[0].Name()
	if err := os.MkdirAll(filepath.Join(store, id), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, id, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, id, "report.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "crash.json")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`{"dir": %q}`, store)), 0o600); err != nil {
		t.Fatal(err)
	}
	golden(t, "crash-list", false, "crash", "list", "--config", config)
	golden(t, "crash-list-json", false, "crash", "list", "--json", "--config", config)
	golden(t, "crash-show", false, "crash", "show", id, "--config", config)
	golden(t, "crash-show-json", false, "crash", "show", id, "--json", "--config", config)
}

// goldenMasks replace what differs between runs of the same command on
// the same input.
var goldenMasks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b(in|took|after) [0-9.]+(ns|µs|ms|s|m)\b`), "$1 T"},
	{regexp.MustCompile(`"(took|elapsed)_(ms|us|ns|seconds)":\s*[0-9.]+`), `"$1_$2": T`},
}

// golden runs rbscope with args (or, for args "-" FILE, reads FILE) and
// compares stdout with testdata/golden/NAME.golden, or its SHA-256 when
// hashed.
func golden(t *testing.T, name string, hashed bool, args ...string) {
	t.Helper()
	var out string
	if args[0] == "-" {
		b, err := os.ReadFile(args[1])
		if err != nil {
			t.Fatal(err)
		}
		out = string(b)
	} else {
		var stderr string
		var code int
		out, stderr, code = rbscope(t, args...)
		if code != 0 {
			t.Errorf("%s: rbscope %s: exit %d: %s", name, strings.Join(args, " "), code, stderr)
			return
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "/") {
			out = strings.ReplaceAll(out, a, "INPUT/"+filepath.Base(a))
		}
	}
	for _, m := range goldenMasks {
		out = m.re.ReplaceAllString(out, m.with)
	}
	if hashed {
		sum := sha256.Sum256([]byte(out))
		out = fmt.Sprintf("sha256 %s, %d bytes\n", hex.EncodeToString(sum[:]), len(out))
	}
	path := testruby.Testdata(filepath.Join("golden", name+".golden"))
	if *updateGolden {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (go test ./cmd/rbscope -run TestGolden -update writes it)", name, err)
	}
	if !bytes.Equal(want, []byte(out)) {
		t.Errorf("%s: rbscope %s prints otherwise than %s:\n%s", name, strings.Join(args, " "), path, firstDiff(string(want), out))
	}
}

// firstDiff shows the first line where two texts differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  golden: %q\n  now:    %q", i+1, wl, gl)
		}
	}
	return "(equal lines, different ends)"
}
