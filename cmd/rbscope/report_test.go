package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestReportRaw records the 50/30/20 workload as raw and renders it later:
// collapsed stacks with the workload's chains, the raw again byte for
// byte, files 0600; bad input is refused in one line.
func TestReportRaw(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	dir := t.TempDir()
	raw := filepath.Join(dir, "app.raw.gz")
	_, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--duration", "1.5", "--rate", "200", "--threads", "-f", "raw", "-o", raw)
	if code != 0 {
		t.Fatalf("record raw: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := rbscope(t, "report", "-i", raw, "--format", "collapsed", "-o", "-")
	if code != 0 {
		t.Fatalf("report collapsed: exit %d: %s", code, stderr)
	}
	if shares, total := chainShares(t, stdout); total == 0 || shares["chain_a"] == 0 || !strings.Contains(stdout, "thread main;") {
		t.Errorf("collapsed from raw:\n%.500s", stdout)
	}
	// The default output is the input's name with the format's extension.
	if _, stderr, code = rbscope(t, "report", "-i", raw, "-f", "summary"); code != 0 {
		t.Fatalf("report summary: exit %d: %s", code, stderr)
	}
	if st, err := os.Stat(filepath.Join(dir, "app.summary.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("report's default output: %v, %v", st, err)
	}
	again := filepath.Join(dir, "again.raw.gz")
	if _, stderr, code = rbscope(t, "report", "-i", raw, "-f", "raw", "-o", again); code != 0 {
		t.Fatalf("report raw: exit %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(raw)
	b, _ := os.ReadFile(again)
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("raw rendered as raw differs (%d bytes, %d before)", len(b), len(a))
	}

	notRaw := filepath.Join(dir, "x.txt")
	os.WriteFile(notRaw, []byte("hello"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no input", []string{"report", "-f", "summary"}, 2, "--input is required"},
		{"bad format", []string{"report", "-i", raw, "-f", "png"}, 2, `--format "png" is not one of`},
		{"missing", []string{"report", "-i", filepath.Join(dir, "none.raw.gz")}, 1, "cannot read"},
		{"not raw", []string{"report", "-i", notRaw, "-o", "-"}, 1, "not a raw rbscope recording"},
		{"unwritable", []string{"report", "-i", raw, "-o", "/nonexistent/dir/x.svg"}, 1, "cannot write /nonexistent/dir/x.svg"},
	} {
		_, stderr, code := rbscope(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%s: exit %d stderr %q; want exit %d and one line with %q", tc.name, code, stderr, tc.code, tc.want)
		}
	}
}
