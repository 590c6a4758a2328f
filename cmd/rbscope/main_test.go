package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

var rbscopeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rbscope-test")
	if err != nil {
		panic(err)
	}
	rbscopeBin = filepath.Join(dir, "rbscope")
	if out, err := exec.Command("go", "build", "-o", rbscopeBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building rbscope: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// rbscope runs the binary and returns stdout, stderr and the exit code.
func rbscope(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, exec.Command(rbscopeBin, args...))
}

// runCommand runs cmd and returns stdout, stderr and the exit code.
func runCommand(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// regexpLine reports whether a line of text matches the expression.
func regexpLine(text, expr string) bool {
	return regexp.MustCompile(`(?m)` + expr).MatchString(text)
}

// processState returns the state letter of /proc/PID/stat ("S", "R", "t"...).
func processState(t *testing.T, pid int) string {
	st, err := procfs.ReadStat(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(st.State)
}

func TestStackJSONAndText(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "stack_threads.rb", nil, "100")
	var rep struct {
		Version     string   `json:"version"`
		ThreadNames []string `json:"thread_names"`
	}
	p.WaitReport(t, &rep, 30*time.Second)

	stdout, stderr, code := rbscope(t, "stack", "-p", fmt.Sprint(p.PID()), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		PID         int    `json:"pid"`
		RubyVersion string `json:"ruby_version"`
		Threads     []struct {
			Name   string `json:"name"`
			TID    int    `json:"tid"`
			Status string `json:"status"`
			Main   bool   `json:"main"`
			Frames []struct {
				Kind, Label, Path string
				Line              int
			} `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	if doc.PID != p.PID() || doc.RubyVersion != rep.Version {
		t.Errorf("pid %d version %q, want %d %q", doc.PID, doc.RubyVersion, p.PID(), rep.Version)
	}
	var names []string
	for _, th := range doc.Threads {
		names = append(names, th.Name)
		if len(th.Frames) == 0 {
			t.Errorf("thread %q has no frames", th.Name)
		}
	}
	if strings.Join(names, ",") != strings.Join(rep.ThreadNames, ",") {
		t.Errorf("threads %q, Thread.list says %q", names, rep.ThreadNames)
	}
	if st := processState(t, p.PID()); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}

	text, stderr, code := rbscope(t, "stack", "-p", fmt.Sprint(p.PID()))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The columns are aligned per thread, so a C frame's label and
	// "<cfunc>" are apart by a varying run of spaces.
	for _, want := range []string{`Thread "main" tid=`, `Thread "deep"`, `Thread "blocked"`, `Thread::Mutex#lock\s+<cfunc>`, `Kernel#sleep\s+<cfunc>`, `stack_threads\.rb:\d+`} {
		if !regexpLine(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
}

func TestStackErrors(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	dead := exec.Command("true")
	dead.Run()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no pid", []string{"stack"}, 2, "--pid is required"},
		{"bad flag", []string{"stack", "--frobnicate"}, 2, "unknown flag"},
		{"bad pid", []string{"stack", "-p", "abc"}, 2, "invalid argument"},
		{"no such process", []string{"stack", "-p", fmt.Sprint(dead.Process.Pid)}, 1, "no such process"},
		{"not ruby", []string{"stack", "-p", fmt.Sprint(sleeper.Process.Pid)}, 1, "not a Ruby process (it runs sleep)"},
		{"unknown command", []string{"frobnicate"}, 1, "unknown command"},
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
		})
	}
}

// TestStackPermissionDenied runs rbscope as an unprivileged user against a
// root-owned Ruby: the error must say what to grant.
func TestStackPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to start a process as another user")
	}
	rb := testruby.Rubies(t)[0]
	proc := exec.Command(rb.Bin, "-e", "sleep")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { proc.Process.Kill(); proc.Wait() }()
	if err := os.Chmod(filepath.Dir(rbscopeBin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rbscopeBin, "stack", "-p", fmt.Sprint(proc.Process.Pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1; output %s", err, out)
	}
	if !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "CAP_SYS_PTRACE") {
		t.Errorf("output %q does not explain the permission problem", out)
	}
	if !strings.HasSuffix(string(out), "(see "+target.DocPermissions+")\n") && !strings.HasSuffix(string(out), "(see "+target.DocPtraceScope+")\n") {
		t.Errorf("output %q does not end with the page on permissions", out)
	}
}

// TestSignalEndsAnyCommand: SIGINT, SIGTERM and SIGHUP end even a command
// that does not watch the run's context (here heap top, blocked reading a
// pipe that never ends), with the status the signal's default would have
// given (128 plus its number), and without a Go stack.
func TestSignalEndsAnyCommand(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { signalEndsHeapTop(t, sig) })
	}
}

func signalEndsHeapTop(t *testing.T, sig syscall.Signal) {
	cmd := exec.Command(rbscopeBin, "heap", "top", "/dev/stdin")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Signal once heap top holds the pipe open as a file of its own: that
	// happens after main set up its signal handling, however slow the
	// start. (SigCgt does not tell: the Go runtime catches SIGINT from its
	// first instruction and, before signal.Notify, exits on it.)
	fdDir := fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); !opensStdinAgain(fdDir); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("setup: heap top never opened /dev/stdin")
		}
	}
	cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 128+int(sig) || strings.Contains(stderr.String(), "goroutine") {
			t.Errorf("heap top after %v: %v, stderr %q; want exit %d", sig, err, stderr.String(), 128+int(sig))
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("heap top did not end on %v", sig)
	}
}

// opensStdinAgain reports whether the process whose fd directory is fdDir
// holds its standard input open a second time, at a descriptor above 2.
func opensStdinAgain(fdDir string) bool {
	stdin, err := os.Readlink(filepath.Join(fdDir, "0"))
	if err != nil {
		return false
	}
	ents, _ := os.ReadDir(fdDir)
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err != nil || n <= 2 {
			continue
		}
		if link, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && link == stdin {
			return true
		}
	}
	return false
}
