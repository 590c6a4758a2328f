package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// startSleeper starts testdata/exec_target.rb in sleep mode, as uid when
// uid is not 0, and waits for it to be ready.
func startSleeper(t *testing.T, uid int) int { return startExecTarget(t, uid, "sleep") }

// startExecTarget starts testdata/exec_target.rb in mode, as uid when uid
// is not 0, and waits for it to be ready.
func startExecTarget(t *testing.T, uid int, mode string) int {
	t.Helper()
	rb := testruby.Rubies(t)[0]
	dir, err := os.MkdirTemp("", "rbscope-exec-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src, err := os.ReadFile(testruby.Testdata("exec_target.rb"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "exec_target.rb")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	report := filepath.Join(dir, "report.json")
	cmd := exec.Command(rb.Bin, script, report, mode)
	testruby.DieWithTest(cmd)
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(report); err == nil {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the Ruby program did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecCLI(t *testing.T) {
	pid := startSleeper(t, 0)
	p := fmt.Sprint(pid)
	script := filepath.Join(t.TempDir(), "code.rb")
	os.WriteFile(script, []byte("a = $answer\na * 2\n"), 0o644)
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"value", []string{"exec", "-p", p, "$answer + 1"}, 0, "43\n", ""},
		{"file", []string{"exec", "-p", p, "-f", script}, 0, "84\n", ""},
		{"raises", []string{"exec", "-p", p, "raise 'boom'"}, 1, "", "rbscope: the code raised RuntimeError: boom\n\tfrom (rbscope exec):1:in"},
		{"syntax error", []string{"exec", "-p", p, "1 +* 2)"}, 1, "", "the code raised SyntaxError: (rbscope exec):1: syntax error"},
		{"no code", []string{"exec", "-p", p}, 2, "", "no code to run"},
		{"two codes", []string{"exec", "-p", p, "1", "2"}, 2, "", "give the code as one argument"},
		{"code and file", []string{"exec", "-p", p, "-f", script, "1"}, 2, "", "either as an argument or with --file"},
		{"no pid", []string{"exec", "1"}, 2, "", "--pid is required"},
		{"bad timeout", []string{"exec", "-p", p, "--timeout", "0s", "1"}, 2, "", "--timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := rbscope(t, tc.args...)
			if code != tc.code || stdout != tc.stdout || !strings.Contains(stderr, tc.stderr) || strings.Contains(stderr, "goroutine") {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q...", code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			checkNotStopped(t, pid)
		})
	}
}

// TestExecInterrupted: Ctrl-C while the code waits for a safe point (a
// thread holds the GVL in C for 4 s) exits 130, and the emptied request
// does nothing when the process gets there.
func TestExecInterrupted(t *testing.T) {
	pid := startExecTarget(t, 0, "gvl")
	time.Sleep(300 * time.Millisecond)
	cmd := exec.Command(rbscopeBin, "exec", "-p", fmt.Sprint(pid), "$answer = -1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || !strings.Contains(out.String(), "interrupted before the code finished") {
		t.Fatalf("exec after SIGINT: %v, %q; want exit 130 saying it was interrupted", err, out.String())
	}
	if stdout, stderr, code := rbscope(t, "exec", "-p", fmt.Sprint(pid), "$answer"); code != 0 || stdout != "42\n" {
		t.Errorf("after the interrupted exec: $answer = %q (%s), want 42: the emptied request must not run", stdout, stderr)
	}
}

// TestExecOtherUser runs code in a process of another user (its answer
// directory must belong to that user), and then, as that unprivileged user,
// in a root process: refused with what to grant.
func TestExecOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to start processes as another user")
	}
	pid := startSleeper(t, 65534)
	if stdout, stderr, code := rbscope(t, "exec", "-p", fmt.Sprint(pid), "Process.uid"); code != 0 || stdout != "65534\n" {
		t.Errorf("exec in nobody's process: exit %d, %q, %q", code, stdout, stderr)
	}
	rootPID := startSleeper(t, 0)
	os.Chmod(filepath.Dir(rbscopeBin), 0o755)
	cmd := exec.Command(rbscopeBin, "exec", "-p", fmt.Sprint(rootPID), "1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "CAP_SYS_PTRACE") {
		t.Errorf("exec as nobody in a root process: %v, %q; want exit 1 saying what to grant", err, out)
	}
}

func TestAllocCLI(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "alloc_workload.rb", nil)
	var w struct {
		PID      int    `json:"pid"`
		KeepMany int    `json:"keep_many"`
		KeepFew  int    `json:"keep_few"`
		File     string `json:"file"`
	}
	p.WaitReport(t, &w, 30*time.Second)
	pid := fmt.Sprint(p.PID())

	stdout, stderr, code := rbscope(t, "alloc", "-p", pid, "-d", "1s", "--json", "--top", "2")
	if code != 0 {
		t.Fatalf("alloc --json: exit %d, %s", code, stderr)
	}
	schema, sites := allocJSON(t, stdout)
	if schema != wire.SchemaVersion {
		t.Fatalf("alloc --json: schema %d\n%s", schema, stdout)
	}
	if len(sites) != 2 || sites[0].Line != w.KeepMany || sites[1].Line != w.KeepFew || sites[0].Class != "String" || sites[0].Bytes < 40*sites[0].Count {
		t.Errorf("alloc --json --top 2 = %+v, want lines %d then %d, Strings", sites, w.KeepMany, w.KeepFew)
	}

	stdout, _, code = rbscope(t, "alloc", "-p", pid, "-d", "1s", "--by", "class")
	if code != 0 || !strings.Contains(stdout, "objects (") || !regexpLine(stdout, `^\s+\d+\s+\d+\s+String$`) {
		t.Errorf("alloc --by class: exit %d\n%s", code, stdout)
	}

	for _, bad := range [][]string{
		{"alloc", "-p", pid, "--by", "method"},
		{"alloc", "-p", pid, "-d", "0s"},
		{"alloc", "-d", "1s"},
	} {
		if _, stderr, code := rbscope(t, bad...); code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want a one-line usage error", bad, code, stderr)
		}
	}

	// Ctrl-C ends the window early, with tracing off again.
	cmd := exec.Command(rbscopeBin, "alloc", "-p", pid, "-d", "1m")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(errOut.String(), "tracing allocations") {
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || !strings.Contains(errOut.String(), "is off again") {
		t.Errorf("alloc after SIGINT: %v, %q; want exit 130 saying tracing is off", err, errOut.String())
	}
	if stdout, _, _ := rbscope(t, "exec", "-p", pid, "[ObjectSpace.allocation_sourcefile(Object.new), Thread.list.map(&:name).grep(/alloc/)]"); stdout != "[nil, []]\n" {
		t.Errorf("after an interrupted alloc: tracing and watchdog = %s, want [nil, []]", stdout)
	}

	// The target exits during the window.
	cmd = exec.Command(rbscopeBin, "alloc", "-p", pid, "-d", "2s")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Start()
	time.Sleep(time.Second)
	p.Cmd.Process.Kill()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out.String(), "exited during the allocation window; nothing to report") || strings.Contains(out.String(), "count") {
		t.Errorf("target killed mid-window: %v, %q", err, out.String())
	}
}
