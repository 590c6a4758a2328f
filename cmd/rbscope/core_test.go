package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// coreDoc is what `rbscope core --json` prints.
type coreDoc struct {
	Core        string `json:"core"`
	Command     string `json:"command"`
	Signal      string `json:"signal"`
	SignalTID   int    `json:"signal_tid"`
	PID         int    `json:"pid"`
	RubyVersion string `json:"ruby_version"`
	Threads     []struct {
		Name   string `json:"name"`
		TID    int    `json:"tid"`
		Main   bool   `json:"main"`
		Status string `json:"status"`
		Frames []struct {
			Kind, Label, Path string
			Line              int
		} `json:"frames"`
		Error string `json:"error"`
	} `json:"threads"`
	Census []struct {
		Type, Class  string
		Count, Bytes int
	} `json:"census"`
}

func coreJSON(t *testing.T, args ...string) coreDoc {
	t.Helper()
	stdout, stderr, code := rbscope(t, append([]string{"core", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("rbscope core %v: exit %d: %s", args, code, stderr)
	}
	var doc coreDoc
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	return doc
}

// rubyCore runs testdata/stack_threads.rb, takes its core with gcore and
// kills it.
func rubyCore(t *testing.T) (string, []string, int, string) {
	t.Helper()
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "stack_threads.rb", nil, "100")
	var rep struct {
		Version     string   `json:"version"`
		ThreadNames []string `json:"thread_names"`
	}
	p.WaitReport(t, &rep, 30*time.Second)
	core := testruby.Gcore(t, p.PID())
	p.Cmd.Process.Kill()
	p.Cmd.Wait()
	return core, rep.ThreadNames, p.PID(), rep.Version
}

func TestCoreJSONAndText(t *testing.T) {
	core, names, pid, version := rubyCore(t)

	doc := coreJSON(t, core, "--census")
	if doc.PID != pid || doc.RubyVersion != version || doc.Core != core {
		t.Errorf("pid %d version %q core %q, want %d %q %q", doc.PID, doc.RubyVersion, doc.Core, pid, version, core)
	}
	var got []string
	for _, th := range doc.Threads {
		got = append(got, th.Name)
		if len(th.Frames) == 0 || th.Error != "" {
			t.Errorf("thread %q: %d frames, error %q", th.Name, len(th.Frames), th.Error)
		}
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("threads %q, Thread.list says %q", got, names)
	}
	nStrings := 0
	for _, row := range doc.Census {
		if row.Class == "String" {
			nStrings = row.Count
		}
	}
	if nStrings < 1000 {
		t.Errorf("census: %d Strings in %d rows", nStrings, len(doc.Census))
	}

	text, stderr, code := rbscope(t, "core", core, "--census")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{fmt.Sprintf("core %s: pid %d (", core, pid), `Thread "main" tid=`, `Thread "deep"`, "Thread::Mutex#lock", "stack_threads.rb:", "live objects", "CLASS "} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	// Columns are as wide as each thread's longest label.
	if !regexp.MustCompile(`\n +Kernel#sleep +<cfunc>\n`).MatchString(text) {
		t.Errorf("text output lacks a Kernel#sleep <cfunc> frame:\n%s", text)
	}
}

// TestCoreErrors: each bad input is refused in a line that says why.
func TestCoreErrors(t *testing.T) {
	core, _, _, _ := rubyCore(t)
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	half := filepath.Join(dir, "half")
	testruby.CopyPrefix(t, core, half, testruby.Half)

	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	sleepCore := testruby.Gcore(t, sleeper.Process.Pid)
	empty := t.TempDir()

	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no core", []string{"core"}, 2, []string{"one core file is required"}},
		{"no such file", []string{"core", filepath.Join(dir, "nope")}, 1, []string{"no such file"}},
		{"not ELF", []string{"core", text}, 1, []string{text + " is not a core file (not ELF"}},
		{"not a core", []string{"core", "/bin/true"}, 1, []string{"/bin/true is a", "not a core file"}},
		{"truncated", []string{"core", half}, 1, []string{"truncated", "notes at file offset"}},
		{"not Ruby", []string{"core", sleepCore}, 1, []string{"not a Ruby process (it runs sleep)"}},
		{"files missing", []string{"core", core, "--sysroot", empty}, 1, []string{"is not on this machine (looked for " + empty + "/", "--sysroot DIR"}},
	} {
		stdout, stderr, code := rbscope(t, c.args...)
		if code != c.code || stdout != "" {
			t.Errorf("%s: exit %d (want %d), stdout %q", c.name, code, c.code, stdout)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, stderr, w)
			}
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 || strings.Contains(stderr, "internal error") {
			t.Errorf("%s: not one clean line: %q", c.name, stderr)
		}
	}
}

// TestCoreKernelCrash reads the core the kernel wrote of a Ruby that crashed
// itself, whole and cut in half.
func TestCoreKernelCrash(t *testing.T) {
	dir := t.TempDir()
	pattern := filepath.Join(dir, "core.%p")
	testruby.SetCorePattern(t, pattern)
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "core_crash.rb", nil)
	done := make(chan struct{})
	go func() { p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("no crash within 2 minutes:\n%s", p.Output())
	}
	if now, _ := os.ReadFile(testruby.CorePatternPath); strings.TrimSpace(string(now)) != pattern {
		t.Skipf("another process changed core_pattern meanwhile (to %q)", now)
	}
	if ws, _ := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.CoreDump() {
		t.Fatalf("ended (%v) without a core:\n%s", p.Cmd.ProcessState, p.Output())
	}
	core := filepath.Join(dir, fmt.Sprintf("core.%d", p.PID()))

	doc := coreJSON(t, core)
	if doc.Signal != "SIGABRT" && doc.Signal != "SIGSEGV" {
		t.Errorf("signal %q, want SIGABRT or SIGSEGV", doc.Signal)
	}
	var main, sleeper bool
	for _, th := range doc.Threads {
		if th.Main && len(th.Frames) > 1 && th.Frames[0].Label == "Process.kill" && strings.HasSuffix(th.Frames[1].Label, "crash") {
			main = true
		}
		sleeper = sleeper || th.Name == "sleeper"
	}
	if !main || !sleeper {
		t.Errorf("main thread in Process.kill from Crasher#crash: %v, thread sleeper: %v\n%+v", main, sleeper, doc.Threads)
	}

	half := filepath.Join(t.TempDir(), "half")
	testruby.CopyPrefix(t, core, half, testruby.Half)
	stdout, stderr, code := rbscope(t, "core", half)
	t.Logf("half a kernel core: exit %d\n%s%s", code, stdout, stderr)
	if !strings.Contains(stderr, "warning: "+half+" is truncated") || strings.Contains(stderr, "internal error") {
		t.Errorf("half a core: exit %d, stderr %q", code, stderr)
	}
	if code == 0 && !strings.Contains(stdout, "truncated") {
		t.Errorf("half a core read without an error noted:\n%s", stdout)
	}
}

// TestCoreFromElsewhere reads a peer core (made on a machine we never saw,
// see internal/rubyvm's TestCorePeerCores) through the command line: its
// files are not here, and the core holds none of libruby's read-only data,
// so no string of its image says its Ruby's release. rbscope proves the
// release from the process's heap (its file's name is only a hint), reads
// the core's own images, and says so, and how the release was proven, in
// one line on stderr. --force-version is the user's word, and wins.
func TestCoreFromElsewhere(t *testing.T) {
	src := filepath.Join(testruby.EnvOr("RBSCOPE_PEER_CORES", "/work/shared/peer-cores"), "ruby-coredump-3.1.0.gz")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no peer core: %v", err)
	}
	core := testruby.UnpackCore(t, src, filepath.Join(testruby.CoreCache(), "peer-cores"))
	stdout, stderr, code := rbscope(t, "core", core)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "read its ELF image as the core holds it") ||
		!strings.Contains(stderr, "Ruby 3.1.0 taken from RbConfig::CONFIG's RUBY_PROGRAM_VERSION with the process's RUBY_PATCHLEVEL 0, read from its heap with 3.1's table") {
		t.Errorf("stderr is not the one line saying how the core was read and its release proven: %q", stderr)
	}
	if !strings.HasPrefix(stdout, "core "+core+": pid 41319 (ruby), Ruby 3.1.0\n") {
		t.Errorf("stdout does not begin with the core's Ruby 3.1.0:\n%s", stdout)
	}
	if !regexpLine(stdout, `^ +Kernel#sleep +<cfunc>$`) || !regexpLine(stdout, `^ +Object#aaa +\S*infinite.rb:2$`) {
		t.Errorf("stdout lacks the main thread's frames:\n%s", stdout)
	}
	// --sysroot wins: the files are looked for there, and their absence
	// is an error again.
	empty := t.TempDir()
	_, stderr, code = rbscope(t, "core", core, "--sysroot", empty)
	if code != 1 || !strings.Contains(stderr, "is not on this machine (looked for "+empty+"/") {
		t.Errorf("--sysroot: exit %d, %q", code, stderr)
	}
	// another release is the user's word
	_, stderr, code = rbscope(t, "core", core, "--force-version", "3.1.2")
	if code != 0 || !strings.Contains(stderr, "Ruby 3.1.2 taken from --force-version") {
		t.Errorf("--force-version: exit %d, %q", code, stderr)
	}
}

// TestCoreRefusedFamily: a peer core of Ruby 3.0, which has no table, and
// whose heap no other family's table reads, is refused in one line naming
// the release its file's name says and its family.
func TestCoreRefusedFamily(t *testing.T) {
	src := filepath.Join(testruby.EnvOr("RBSCOPE_PEER_CORES", "/work/shared/peer-cores"), "ruby-coredump-3.0.0.gz")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no peer core: %v", err)
	}
	core := testruby.UnpackCore(t, src, filepath.Join(testruby.CoreCache(), "peer-cores"))
	stdout, stderr, code := rbscope(t, "core", core)
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "its file's name says Ruby 3.0.0") ||
		!strings.Contains(stderr, "Ruby 3.0 has no built-in table") || !strings.Contains(stderr, "no built-in table fits it") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestForceVersionLive: --force-version reaches a live process's VM too.
func TestForceVersionLive(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "stack_threads.rb", nil, "100")
	var rep struct {
		Version string `json:"version"`
	}
	p.WaitReport(t, &rep, 30*time.Second)
	pid := fmt.Sprint(p.PID())
	fam := rep.Version[:strings.LastIndexByte(rep.Version, '.')]
	stdout, stderr, code := rbscope(t, "stack", "-p", pid, "--json", "--force-version", fam+".99")
	if code != 0 || !strings.Contains(stdout, `"ruby_version": "`+fam+`.99"`) {
		t.Errorf("--force-version %s.99: exit %d, %s\n%s", fam, code, stderr, stdout)
	}
	_, stderr, code = rbscope(t, "stack", "-p", pid, "--force-version", "banana")
	if code != 2 || !strings.Contains(stderr, `--force-version "banana"`) {
		t.Errorf("--force-version banana: exit %d, %q", code, stderr)
	}
	_, stderr, code = rbscope(t, "stack", "-p", pid, "--force-version", "2.0.0")
	if code != 1 || !strings.Contains(stderr, "Ruby 2.0.0") || !strings.Contains(stderr, "--force-version") {
		t.Errorf("--force-version 2.0.0: exit %d, %q", code, stderr)
	}
}
