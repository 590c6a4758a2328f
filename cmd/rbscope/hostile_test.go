package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/testruby"
)

// Debian's Ruby, which the hostile tests copy into a directory the target's
// user owns.
const (
	debianRuby    = "/usr/bin/ruby3.1"
	debianLibruby = "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1"
)

// hostile is a Ruby process running as nobody from copies of the ruby
// executable and libruby in a directory nobody owns, so that it can replace
// the files at the paths its mappings name.
type hostile struct {
	cmd    *exec.Cmd
	dir    string
	exe    string // dir/ruby
	lib    string // dir/libruby-3.1.so.3.1
	out    *bufio.Reader
	nobody *syscall.Credential
}

func (h *hostile) pid() int { return h.cmd.Process.Pid }

// startHostile starts code (which must print a line when it is ready) in
// Debian's Ruby as nobody, and checks that the process is what the test
// needs: running as nobody, with its executable and libruby mapped from
// the directory nobody owns.
func startHostile(t *testing.T, code string, env ...string) *hostile {
	t.Helper()
	return startHostileNamed(t, "ruby", code, env, nil)
}

// startHostileNamed is startHostile with the executable copied as exeName,
// and args after the code.
func startHostileNamed(t *testing.T, exeName, code string, env, args []string) *hostile {
	t.Helper()
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root: the target runs as nobody")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return startHostileAs(t, uid, gid, exeName, code, env, args)
}

// startHostileAs is startHostileNamed as user uid (an unprivileged user
// like nobody, but one no other process on the machine uses, for a target
// that must tell rbscope's files for it from those for other processes).
func startHostileAs(t *testing.T, uid, gid int, exeName, code string, env, args []string) *hostile {
	t.Helper()
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root: the target runs as an unprivileged user")
	}
	lib, err := filepath.EvalSymlinks(debianLibruby)
	if err != nil {
		testruby.Missing(t, "Debian's Ruby is not installed: %v", err)
	}
	dir, err := os.MkdirTemp("/tmp", "rbh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &hostile{dir: dir, exe: filepath.Join(dir, exeName), lib: filepath.Join(dir, filepath.Base(debianLibruby)),
		nobody: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	for from, to := range map[string]string{debianRuby: h.exe, lib: h.lib} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{dir, h.exe, h.lib} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	h.cmd = exec.Command(h.exe, append([]string{"--disable-gems", "-e", code, "--"}, args...)...)
	h.cmd.Dir = dir
	h.cmd.Env = append([]string{"LD_LIBRARY_PATH=" + dir, "PATH=/usr/bin:/bin"}, env...)
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: h.nobody}
	h.cmd.Stderr = os.Stderr
	stdout, _ := h.cmd.StdoutPipe()
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cmd.Process.Kill(); h.cmd.Wait() })
	h.out = bufio.NewReader(stdout)
	ready := make(chan string, 1)
	go func() { line, _ := h.out.ReadString('\n'); ready <- line }()
	select {
	case line := <-ready:
		if line == "" {
			t.Fatal("setup: the hostile Ruby exited before it was ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("setup: the hostile Ruby printed nothing in 30s")
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.pid()))
	if !regexpLine(string(status), fmt.Sprintf(`^Uid:\s+%d\s`, uid)) {
		t.Fatalf("setup: the target does not run as uid %d:\n%s", uid, status)
	}
	h.checkMapped(t)
	return h
}

// checkMapped fails the test unless the target maps both copies under their
// names (the kernel adds " (deleted)" once a name is replaced, which
// rbscope used to drop before opening the path).
func (h *hostile) checkMapped(t *testing.T) {
	t.Helper()
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", h.pid()))
	for _, p := range []string{h.exe, h.lib} {
		if !regexpLine(string(maps), ` `+regexp.QuoteMeta(strings.ReplaceAll(p, "\n", `\012`))+`( \(deleted\))?$`) {
			t.Fatalf("setup: %s is not mapped under its name:\n%s", p, maps)
		}
	}
}

// plant replaces the executable and libruby at their paths, as the target's
// user can: by a FIFO, or by a symlink to secret.
func (h *hostile) plant(t *testing.T, kind, secret string) {
	t.Helper()
	for _, p := range []string{h.exe, h.lib} {
		tmp := p + ".new"
		switch kind {
		case "fifo":
			if err := unix.Mkfifo(tmp, 0o666); err != nil {
				t.Fatal(err)
			}
		case "symlink":
			if err := os.Symlink(secret, tmp); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
		st, err := os.Lstat(p)
		if err != nil || (kind == "fifo") != (st.Mode()&os.ModeNamedPipe != 0) || (kind == "symlink") != (st.Mode()&os.ModeSymlink != 0) {
			t.Fatalf("setup: %s is not a %s: %v %v", p, kind, st, err)
		}
	}
	h.checkMapped(t)
}

// rootSecret writes a file only root can read and returns its path and
// contents, which must never show in what rbscope prints or keeps.
func rootSecret(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	secret := fmt.Sprintf("ROOTSECRET-%d-do-not-print", time.Now().UnixNano())
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

// leaks reports whether out shows secret's bytes, as text or as the
// decimal bytes Go prints for a bad ELF magic number.
func leaks(out, secret string) bool {
	var dec []string
	for _, c := range []byte(secret[:4]) {
		dec = append(dec, strconv.Itoa(int(c)))
	}
	return strings.Contains(out, secret[:8]) || strings.Contains(out, strings.Join(dec, " "))
}

// runBounded runs rbscope with a deadline and stdin; timedOut says it was
// killed at the deadline.
func runBounded(t *testing.T, d time.Duration, stdin io.Reader, args ...string) (out string, code int, timedOut bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, rbscopeBin, args...)
	cmd.Stdin = stdin
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if ctx.Err() != nil {
		return b.String(), -1, true
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return b.String(), ee.ExitCode(), false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), 0, false
}

// TestHostileImagePathStack: a target running as nobody replaces its
// executable and libruby, after mapping them, by a FIFO (opening it blocked
// rbscope for good) or by a symlink to a root-only file (rbscope printed
// its first bytes). rbscope reads the mapped files, not the paths.
func TestHostileImagePathStack(t *testing.T) {
	for _, kind := range []string{"fifo", "symlink"} {
		t.Run(kind, func(t *testing.T) {
			secretPath, secret := rootSecret(t)
			h := startHostile(t, `STDOUT.puts :ready; STDOUT.flush; sleep`)
			h.plant(t, kind, secretPath)
			out, code, timedOut := runBounded(t, 30*time.Second, nil, "stack", "-p", strconv.Itoa(h.pid()))
			if timedOut {
				t.Fatalf("rbscope stack hung on the planted %s:\n%s", kind, out)
			}
			if leaks(out, secret) {
				t.Errorf("rbscope stack printed the root-only file's bytes:\n%s", out)
			}
			if code != 0 || !strings.Contains(out, "Kernel#sleep") {
				t.Errorf("exit %d, want the stack with Kernel#sleep:\n%s", code, out)
			}
		})
	}
}

// TestHostileImagePathCrashHandler: the crash handler, run as root for a
// crash of a process running as nobody that replaced its executable and
// libruby by a FIFO or a symlink to a root-only file, neither blocks nor
// keeps (or sends) the file's bytes, and still reads the Ruby stacks.
func TestHostileImagePathCrashHandler(t *testing.T) {
	for _, kind := range []string{"fifo", "symlink"} {
		t.Run(kind, func(t *testing.T) {
			config, store := crashEnv(t)
			secretPath, secret := rootSecret(t)
			h := startHostile(t, `STDOUT.puts :ready; STDOUT.flush; sleep`)
			core := gcoreBytes(t, h.pid()) // before the files change: gdb opens them by path
			h.plant(t, kind, secretPath)
			pid := strconv.Itoa(h.pid())
			out, code, timedOut := runBounded(t, 60*time.Second, bytes.NewReader(core),
				"crash", "handle", "--config", config, pid, pid, "11", strconv.FormatInt(time.Now().Unix(), 10))
			if timedOut {
				t.Fatalf("the crash handler hung on the planted %s:\n%s", kind, out)
			}
			if code != 0 {
				t.Fatalf("crash handle: exit %d: %s", code, out)
			}
			ids := waitReport(t, store, 1)
			var kept bytes.Buffer
			for _, name := range []string{"report.json", "report.txt"} {
				b, err := os.ReadFile(filepath.Join(store, ids[0], name))
				if err != nil {
					t.Fatal(err)
				}
				kept.Write(b)
			}
			if leaks(kept.String()+out, secret) {
				t.Errorf("the report holds the root-only file's bytes:\n%s", kept.String())
			}
			if !strings.Contains(kept.String(), "Kernel#sleep") {
				t.Errorf("the report has no Ruby stack:\n%s", kept.String())
			}
		})
	}
}

// gcoreBytes returns a core of the running process pid.
func gcoreBytes(t *testing.T, pid int) []byte {
	t.Helper()
	b, err := os.ReadFile(testruby.Gcore(t, pid))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCrashHandleFullDisk: with the store on a full disk the local copy of
// the core and the report cannot be written. The chained (previous)
// handler must still get the whole core (it got the part before the first
// failed write), and the webhook must still be told (it was not, when the
// report could not be written).
func TestCrashHandleFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to mount a small tmpfs")
	}
	posted := make(chan string, 4)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted <- string(b)
	}))
	defer web.Close()
	cfg := `"webhook": ` + strconv.Quote(web.URL) + `, "insecure_notify": true, "keep_free_bytes": 1`
	store, chained, core, out := handleOnTmpfs(t, "256k", 4<<20, cfg) // incompressible: core.zst outgrows the disk
	var fs unix.Statfs_t
	if err := unix.Statfs(store, &fs); err != nil || fs.Bavail > 16 {
		t.Fatalf("setup: the store's disk did not fill up (%d blocks free, %v): the test tests nothing", fs.Bavail, err)
	}
	got, err := os.ReadFile(chained)
	if err != nil {
		t.Fatalf("the chained handler wrote nothing: %v\n%s", err, out)
	}
	if !bytes.Equal(got, core) {
		t.Errorf("the chained handler got %d bytes of the %d-byte core", len(got), len(core))
	}
	select {
	case body := <-posted:
		if !strings.Contains(body, `"signal_name":"SIGSEGV"`) {
			t.Errorf("webhook body: %.300s", body)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the webhook was not told of a crash whose report could not be written:\n%s", out)
	}
}

// TestCrashHandleKeepsReserve: a core that would take the store's disk
// into its reserve (keep_free_bytes) is cut where the reserve begins, not
// only refused when the disk is already short at the start; the chained
// handler still gets all of it.
func TestCrashHandleKeepsReserve(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	const reserve = 12 << 20
	store, chained, core, out := handleOnTmpfs(t, "24m", 32<<20, fmt.Sprintf(`"keep_free_bytes": %d`, reserve)) // larger than the disk
	var fs unix.Statfs_t
	if err := unix.Statfs(store, &fs); err != nil {
		t.Fatal(err)
	}
	if free := int64(fs.Bavail) * int64(fs.Bsize); free < reserve-2<<20 {
		t.Errorf("the store's disk has %d bytes free after the crash, its reserve is %d", free, reserve)
	}
	ids, err := crash.List(store)
	if err != nil || len(ids) != 1 {
		t.Fatalf("crashes kept: %v, %v\n%s", ids, err, out)
	}
	r, err := crash.Load(store, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !r.Core.Truncated || !strings.Contains(r.Core.NotStored, "full") {
		t.Errorf("core: %+v, want it cut at the reserve", r.Core)
	}
	if got, err := os.ReadFile(chained); err != nil || !bytes.Equal(got, core) {
		t.Errorf("the chained handler got %d bytes of the %d-byte core (%v)", len(got), len(core), err)
	}
}

// handleOnTmpfs runs crash handle, as the kernel would, on a random core
// of coreSize bytes (incompressible), with its store on a tmpfs of the
// given size and a chained handler that copies the core to chained; cfg
// adds settings to the config. It returns the store, the chained copy's
// path, the core and the handler's output.
func handleOnTmpfs(t *testing.T, size string, coreSize int, cfg string) (store, chained string, core []byte, out string) {
	t.Helper()
	dir := t.TempDir()
	store = filepath.Join(dir, "store")
	os.Mkdir(store, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", store).CombinedOutput(); err != nil {
		t.Fatalf("setup: mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", store).Run() })
	chained = filepath.Join(dir, "chained.core")
	chain := filepath.Join(dir, "chain.sh")
	if err := os.WriteFile(chain, []byte("#!/bin/sh\ncat > "+chained+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "c.json")
	all := fmt.Sprintf(`{"dir": %q, "max_core_bytes": 1073741824, "timeout": "60s", "previous_core_pattern": "|%s %%p", %s}`, store, chain, cfg)
	if err := os.WriteFile(config, []byte(all), 0o600); err != nil {
		t.Fatal(err)
	}
	core = make([]byte, coreSize)
	if _, err := io.ReadFull(cryptoRand{}, core); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(testruby.NoSuchPID())
	out, _, timedOut := runBounded(t, 60*time.Second, bytes.NewReader(core),
		"crash", "handle", "--config", config, pid, pid, "11", strconv.FormatInt(time.Now().Unix(), 10))
	if timedOut {
		t.Fatalf("the handler hung:\n%s", out)
	}
	return store, chained, core, out
}

// cryptoRand reads random bytes.
type cryptoRand struct{}

func (cryptoRand) Read(p []byte) (int, error) { return crand.Read(p) }

// TestHeapDumpMode: a heap dump holds every String of the target; one of a
// process running as nobody was written 0644, readable by every user.
func TestHeapDumpMode(t *testing.T) {
	marker := fmt.Sprintf("dump-marker-%d", time.Now().UnixNano())
	h := startHostile(t, `$keep = "`+marker+`".dup; STDOUT.puts :ready; STDOUT.flush; sleep`)
	// A directory every user can enter (t.TempDir's parent is 0700, which
	// alone would keep nobody out).
	dir, err := os.MkdirTemp("/tmp", "rbdump")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "dump.json")
	res, code, timedOut := runBounded(t, 120*time.Second, nil, "heap", "dump", "-p", strconv.Itoa(h.pid()), "-o", out)
	if timedOut || code != 0 {
		t.Fatalf("heap dump: exit %d (timed out %v): %s", code, timedOut, res)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), marker) {
		t.Fatalf("setup: the dump does not hold the target's string (%v)", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("heap dump written with mode %v, want 0600", st.Mode().Perm())
	}
	catAsNobody := func(p string) error {
		cat := exec.Command("cat", p)
		cat.SysProcAttr = &syscall.SysProcAttr{Credential: h.nobody}
		return cat.Run()
	}
	control := filepath.Join(dir, "control")
	if err := os.WriteFile(control, nil, 0o644); err != nil || catAsNobody(control) != nil {
		t.Fatalf("setup: nobody cannot read a 0644 file beside the dump (%v)", err)
	}
	if err := catAsNobody(out); err == nil {
		t.Error("nobody can read the heap dump")
	}
}

// TestStopSignalDuringPause: Ctrl-Z (SIGTSTP) reaching rbscope while a heap
// dump holds the target stopped used to stop rbscope there, leaving the
// target stopped (state t) until rbscope was continued. Now rbscope stops
// only once the target runs again, and finishes the dump when continued.
func TestStopSignalDuringPause(t *testing.T) {
	// The dump stands the target still only to copy its memory: 600 MB
	// of it make the pause long enough (hundreds of milliseconds) to aim at.
	h := startHostile(t, `$a = Array.new(600_000) { |i| "s#{i}" }; $b = "\xff".b * (600 << 20); STDOUT.puts :ready; STDOUT.flush; sleep`)
	// The signal must reach rbscope while the target is stopped; if the
	// pause ended first (a busy machine), the try proves nothing: again.
	for try := 1; ; try++ {
		if stopDuringPause(t, h) {
			return
		}
		if try == 3 {
			t.Fatal("setup: three times the heap dump's pause ended before SIGTSTP reached rbscope")
		}
	}
}

// TestEndSignalDuringPause: SIGINT, SIGTERM or SIGHUP reaching rbscope
// while a heap dump holds the target stopped ends rbscope at once, with
// the signal's status, the target running again and no output left.
func TestEndSignalDuringPause(t *testing.T) {
	h := startHostile(t, `$a = Array.new(600_000) { |i| "s#{i}" }; $b = "\xff".b * (600 << 20); STDOUT.puts :ready; STDOUT.flush; sleep`)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			for try := 1; !endDuringPause(t, h, sig); try++ {
				if try == 3 {
					t.Fatalf("setup: three times the heap dump's pause ended before %v reached rbscope", sig)
				}
			}
		})
	}
}

// endDuringPause runs one heap dump of h and sends rbscope sig while the
// target is stopped. It returns false when the pause was over by the time
// the signal was sent.
func endDuringPause(t *testing.T, h *hostile, sig syscall.Signal) bool {
	dir := t.TempDir()
	cmd := exec.Command(rbscopeBin, "heap", "dump", "-p", strconv.Itoa(h.pid()), "-o", filepath.Join(dir, "dump.json"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); done <- <-done }()
	waitPausedByDump(t, h)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if processState(t, h.pid()) != "t" {
		<-done
		done <- nil
		return false // the pause ended before the signal: inconclusive
	}
	select {
	case err := <-done:
		done <- err // for the deferred wait
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
			t.Errorf("heap dump after %v while the target stood still: %v (%s); want exit %d", sig, err, stderr.String(), 128+int(sig))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("heap dump did not end on %v", sig)
	}
	checkNotStopped(t, h.pid())
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("files left behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	return true
}

// waitPausedByDump waits until h's process stands stopped (by the heap
// dump just started).
func waitPausedByDump(t *testing.T, h *hostile) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		if processState(t, h.pid()) == "t" {
			return
		}
	}
	t.Fatal("setup: the target was never seen paused by the heap dump")
}

// stopDuringPause runs one heap dump of h, sends rbscope SIGTSTP while the
// target is stopped, and checks the target runs while rbscope is stopped.
// It returns false when the pause was over by the time the signal was sent.
func stopDuringPause(t *testing.T, h *hostile) bool {
	out := filepath.Join(t.TempDir(), "dump.json")
	cmd := exec.Command(rbscopeBin, "heap", "dump", "-p", strconv.Itoa(h.pid()), "-o", out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group that is not orphaned: stop signals stop it
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); <-done }()
	waitPausedByDump(t, h)
	if err := cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	if processState(t, h.pid()) != "t" {
		return false // the pause ended before the signal: inconclusive
	}
	stopped := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !stopped; time.Sleep(time.Millisecond) {
		stopped = processState(t, cmd.Process.Pid) == "T"
	}
	if !stopped {
		t.Fatal("setup: SIGTSTP never stopped rbscope (an orphaned process group ignores it)")
	}
	time.Sleep(200 * time.Millisecond)
	if st := processState(t, h.pid()); st == "t" || st == "T" {
		t.Errorf("rbscope stopped with the target left stopped (state %s)", st)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-done:
		done <- err // for the deferred wait
		if err != nil {
			t.Errorf("heap dump after SIGCONT: %v: %s", err, stderr.String())
		}
	case <-time.After(120 * time.Second):
		t.Fatal("heap dump did not finish after SIGCONT")
	}
	return true
}

// TestHostileEscapes: a target puts terminal escapes (and CR/LF) in its
// executable's name, a frame's path and a thread's name. `stack`, the crash
// report, `crash show`, `crash list` and the mail must show them escaped,
// never as the raw bytes that reach a terminal or start a mail header.
func TestHostileEscapes(t *testing.T) {
	const esc = "\x1b]0;pwned\x07\x1b[2J"
	smtpAddr, mails := fakeSMTP(t)
	_, store := crashEnv(t)
	config := filepath.Join(filepath.Dir(store), "mail.json")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`{"dir": %q, "email": "ops@example.test", "smtp": %q, "insecure_notify": true, "keep_free_bytes": 1}`, store, smtpAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHostileNamed(t, "ruby"+esc+"\r\nBcc: evil@example.test",
		`Thread.current.name = "t\e]0;pwned\a"; eval("STDOUT.puts :ready; STDOUT.flush; sleep", nil, "/app/\e[31mevil.rb", 1)`, nil, nil)
	core := gcoreBytes(t, h.pid())
	pid := strconv.Itoa(h.pid())

	stack, code, timedOut := runBounded(t, 30*time.Second, nil, "stack", "-p", pid)
	if timedOut || code != 0 || !strings.Contains(stack, `evil.rb`) || !strings.Contains(stack, `pwned`) {
		t.Fatalf("setup: rbscope stack (exit %d) does not show the frame path and thread name:\n%s", code, stack)
	}
	if !strings.Contains(stack, `\x1b[31mevil.rb`) || !strings.Contains(stack, `\x1b]0;pwned`) {
		t.Errorf("rbscope stack does not show the frame path and thread name escaped:\n%q", stack)
	}
	out, code, timedOut := runBounded(t, 60*time.Second, bytes.NewReader(core),
		"crash", "handle", "--config", config, pid, pid, "11", strconv.FormatInt(time.Now().Unix(), 10))
	if timedOut || code != 0 {
		t.Fatalf("crash handle: exit %d: %s", code, out)
	}
	ids := waitReport(t, store, 1)
	txt, _ := os.ReadFile(filepath.Join(store, ids[0], "report.txt"))
	show, _, _ := runBounded(t, 30*time.Second, nil, "crash", "show", "--config", config, ids[0])
	list, _, _ := runBounded(t, 30*time.Second, nil, "crash", "list", "--config", config)
	if !strings.Contains(show, `pwned`) || !strings.Contains(list, `pwned`) || !strings.Contains(show, "evil.rb") {
		t.Fatalf("setup: crash show and list do not show the exe name and frame path:\n%s\n%s", show, list)
	}
	for what, text := range map[string]string{"stack": stack, "report.txt": string(txt), "crash show": show, "crash list": list} {
		if strings.ContainsAny(text, "\x1b\x07\r") {
			t.Errorf("%s prints raw escape bytes:\n%q", what, text)
		}
	}
	var mail string
	for deadline := time.Now().Add(10 * time.Second); mail == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := mails(); len(m) > 0 {
			mail = m[0]
		}
	}
	if mail == "" {
		t.Fatal("no mail sent")
	}
	head, _, _ := strings.Cut(mail, "\r\n\r\n")
	for _, line := range strings.Split(head, "\r\n") {
		if name, _, _ := strings.Cut(line, ":"); name != "From" && name != "To" && name != "Subject" && name != "Content-Type" {
			t.Errorf("the exe name made a mail header line %q", line)
		}
	}
	if strings.ContainsAny(head, "\x1b\x07") {
		t.Errorf("mail headers hold raw escapes: %q", head)
	}
}

// TestCrashReportRedactsValues: a crash report (kept, and sent to the
// webhook) left out secrets only by variable name; secrets in values (a
// password in a URL, *_PWD, *_DSN, BUNDLE_* credentials, --*password*= on
// the command line) were kept.
func TestCrashReportRedactsValues(t *testing.T) {
	_, store := crashEnv(t)
	config := filepath.Join(filepath.Dir(store), "plain.json")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`{"dir": %q, "keep_free_bytes": 1}`, store)), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"DATABASE_URL":              "postgres://app:url-secret-1@db/x",
		"MYSQL_PWD":                 "pwd-secret-2",
		"SENTRY_DSN":                "https://dsn-secret-3@ingest.example.test/1",
		"BUNDLE_GEMS__EXAMPLE__COM": "user:bundle-secret-4",
	}
	var env []string
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	h := startHostileNamed(t, "ruby", `STDOUT.puts :ready; STDOUT.flush; sleep`, env, []string{"--db-password=flag-secret-5"})
	core := gcoreBytes(t, h.pid())
	pid := strconv.Itoa(h.pid())
	out, code, timedOut := runBounded(t, 60*time.Second, bytes.NewReader(core),
		"crash", "handle", "--config", config, pid, pid, "11", strconv.FormatInt(time.Now().Unix(), 10))
	if timedOut || code != 0 {
		t.Fatalf("crash handle: exit %d: %s", code, out)
	}
	ids := waitReport(t, store, 1)
	js, _ := os.ReadFile(filepath.Join(store, ids[0], "report.json"))
	txt, _ := os.ReadFile(filepath.Join(store, ids[0], "report.txt"))
	kept := string(js) + string(txt)
	if !strings.Contains(kept, `"DATABASE_URL"`) || !strings.Contains(kept, "--db-password=") {
		t.Fatalf("setup: the report has no DATABASE_URL or --db-password= at all:\n%s", js)
	}
	for _, s := range []string{"url-secret-1", "pwd-secret-2", "dsn-secret-3", "bundle-secret-4", "flag-secret-5"} {
		if strings.Contains(kept, s) {
			t.Errorf("the report keeps %s", s)
		}
	}
}

// TestExecLeavesWaitsAlone: `rbscope exec` on a program whose main thread
// waits must not end the wait. Joining the exec thread from the job left
// the main thread "runnable", so a bare `sleep` or a Mutex#sleep returned
// and the program printed "woke" and exited. Queue#pop and IO.select (with
// and without a timeout) are tested beside them.
func TestExecLeavesWaitsAlone(t *testing.T) {
	for name, c := range map[string]struct{ code, frame string }{
		"sleep":             {`sleep`, "sleep"},
		"Mutex#sleep":       {`Thread.new { sleep }; m = Mutex.new; m.synchronize { m.sleep }`, "sleep"},
		"Queue#pop":         {`Thread.new { sleep }; Queue.new.pop`, "pop"},
		"IO.select":         {`r, w = IO.pipe; IO.select([r])`, "select"},
		"IO.select timeout": {`r, w = IO.pipe; IO.select([r], nil, nil, 60)`, "select"},
	} {
		wait := c.code
		t.Run(name, func(t *testing.T) {
			h := startHostile(t, `STDOUT.puts :ready; STDOUT.flush; `+wait+`; STDOUT.puts "woke"; STDOUT.flush`)
			lines := make(chan string, 4)
			go func() {
				for {
					line, err := h.out.ReadString('\n')
					if err != nil {
						close(lines)
						return
					}
					lines <- line
				}
			}()
			// The main thread must be in its wait before exec comes: "ready"
			// is printed just before it.
			waiting := false
			for deadline := time.Now().Add(30 * time.Second); !waiting && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				waiting = processState(t, h.pid()) == "S" && mainThreadIn(t, h.pid(), c.frame)
			}
			if !waiting {
				t.Fatalf("setup: the main thread never waited in %s", name)
			}
			out, code, timedOut := runBounded(t, 30*time.Second, nil, "exec", "-p", strconv.Itoa(h.pid()), "6 * 7")
			if timedOut || code != 0 || strings.TrimSpace(out) != "42" {
				t.Errorf("exec: exit %d (timed out %v): %s", code, timedOut, out)
			}
			select {
			case line, ok := <-lines:
				if ok {
					t.Errorf("the program's wait ended: it printed %q", line)
				} else {
					t.Errorf("the program exited")
				}
			case <-time.After(500 * time.Millisecond):
			}
			if processState(t, h.pid()) != "S" {
				t.Errorf("the program is in state %s, not waiting", processState(t, h.pid()))
			}
		})
	}
}

// mainThreadIn tells whether the main thread of pid stands in a method whose
// label ends in method, as rbscope stack reads it.
func mainThreadIn(t *testing.T, pid int, method string) bool {
	t.Helper()
	out, _, code := rbscope(t, "stack", "--json", "-p", strconv.Itoa(pid))
	var d struct {
		Threads []struct {
			Main   bool
			Frames []struct{ Label string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		return false
	}
	for _, th := range d.Threads {
		if th.Main && len(th.Frames) > 0 {
			return strings.HasSuffix(th.Frames[0].Label, method)
		}
	}
	return false
}

// TestHostileExchange: `rbscope exec` used to take its answer from a file
// in a directory under the target's /tmp that belonged to the target's
// user. A target running as an unprivileged user renamed that directory
// and left a symbolic link to a root directory in its place (rbscope
// printed part of a root-only file named answer, and deleted it), or put a
// FIFO named answer in it (rbscope hung, deaf to SIGINT). The answer now
// comes through a pipe: exec answers, and nothing of root's is read or
// removed (and no FIFO is opened). The target runs as a uid of its own, not nobody, so that it
// attacks only directories made for it (other tests on the machine may
// run older rbscopes against processes of nobody's).
func TestHostileExchange(t *testing.T) {
	for i, kind := range []string{"symlink", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			id := 61000 + (os.Getpid()*2+i)%4000
			rootDir := t.TempDir()
			os.Chmod(rootDir, 0o700)
			secret := fmt.Sprintf("ROOTSECRET-%d-do-not-print", time.Now().UnixNano())
			body := "ok\n" + secret
			answer := filepath.Join(rootDir, "answer")
			if err := os.WriteFile(answer, []byte(fmt.Sprintf("%d\n%s", len(body), body)), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// What the target left of rbscope's directories (its own only).
				matches, _ := filepath.Glob("/tmp/rbscope-exec-*")
				for _, m := range matches {
					if st, err := os.Lstat(m); err == nil && st.Sys().(*syscall.Stat_t).Uid == uint32(id) {
						os.RemoveAll(m)
					}
				}
			})
			h := startHostileAs(t, id, id, "ruby", `
kind, root = ARGV
Thread.new do
  loop do
    Dir.glob("/tmp/rbscope-exec-*").each do |d|
      next if File.symlink?(d) || !File.owned?(d) || d.end_with?(".moved")
      begin
        File.rename(d, d + ".moved")
        if kind == "symlink"
          File.symlink(root, d)
        else # a FIFO no one writes to, where rbscope looks for the answer
          Dir.mkdir(d, 0o700)
          File.mkfifo(File.join(d, "answer"))
        end
        STDOUT.puts "attacked #{d}"; STDOUT.flush
      rescue SystemCallError
      end
    end
    sleep 0.0005
  end
end
STDOUT.puts :ready; STDOUT.flush
sleep`, nil, []string{kind, rootDir})
			attacked := make(chan string, 16)
			go func() {
				for {
					line, err := h.out.ReadString('\n')
					if err != nil {
						close(attacked)
						return
					}
					attacked <- strings.TrimSpace(line)
				}
			}()
			// Setup: the watcher attacks a directory of its user's that shows
			// up under the name rbscope used.
			decoy := fmt.Sprintf("/tmp/rbscope-exec-setupcheck-%d", time.Now().UnixNano())
			if err := os.Mkdir(decoy, 0o700); err != nil {
				t.Fatal(err)
			}
			os.Chown(decoy, id, id)
			select {
			case line := <-attacked:
				if line != "attacked "+decoy {
					t.Fatalf("setup: the watcher said %q", line)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("setup: the watcher did not attack the decoy directory")
			}
			out, code, timedOut := runBounded(t, 30*time.Second, nil, "exec", "-p", strconv.Itoa(h.pid()), "6 * 7")
			if timedOut {
				t.Fatalf("rbscope exec hung:\n%s", out)
			}
			if strings.Contains(out, secret[:10]) {
				t.Errorf("rbscope exec printed the root-only file:\n%s", out)
			}
			if _, err := os.Stat(answer); err != nil {
				t.Errorf("the root-only file is gone: %v", err)
			}
			if code != 0 || strings.TrimSpace(out) != "42" {
				t.Errorf("exec: exit %d, %q; want 42", code, out)
			}
			// rbscope makes no directory the target's user could attack (the
			// watcher may go on attacking the decoy it made again itself).
			for more := true; more; {
				select {
				case line, ok := <-attacked:
					if ok && !strings.HasPrefix(line, "attacked "+decoy) {
						t.Errorf("rbscope made a directory for the target's user, and the target %s", line)
					}
					more = ok
				default:
					more = false
				}
			}
		})
	}
}

// TestCrashNotifySecurity: reports leave the host encrypted or not at all
// (an http webhook and an SMTP server without STARTTLS are refused unless
// --insecure-notify), and never with the process's environment, which the
// local report keeps.
func TestCrashNotifySecurity(t *testing.T) {
	if _, errOut, code := rbscope(t, "crash", "install", "--config", filepath.Join(t.TempDir(), "c.json"), "--webhook", "http://example.test/hook"); code != 2 || !strings.Contains(errOut, "not https") {
		t.Errorf("install with an http webhook: exit %d: %s", code, errOut)
	}
	_, store := crashEnv(t)
	webURL, posts := fakeWebhook(t)
	smtpAddr, mails := fakeSMTP(t) // offers no STARTTLS
	marker := fmt.Sprintf("env-marker-%d", time.Now().UnixNano())
	h := startHostileNamed(t, "ruby", `STDOUT.puts :ready; STDOUT.flush; sleep`, []string{"APP_SETTING=" + marker}, nil)
	core := gcoreBytes(t, h.pid())
	pid := strconv.Itoa(h.pid())
	for _, insecure := range []bool{false, true} {
		config := filepath.Join(filepath.Dir(store), fmt.Sprintf("n%v.json", insecure))
		cfg := fmt.Sprintf(`{"dir": %q, "webhook": %q, "email": "ops@example.test", "smtp": %q, "insecure_notify": %v, "keep_free_bytes": 1}`, store, webURL, smtpAddr, insecure)
		if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code, timedOut := runBounded(t, 60*time.Second, bytes.NewReader(core),
			"crash", "handle", "--config", config, pid, pid, "11", strconv.FormatInt(time.Now().Unix(), 10))
		if timedOut || code != 0 {
			t.Fatalf("crash handle: exit %d: %s", code, out)
		}
	}
	ids, _ := crash.List(store)
	if len(ids) != 2 {
		t.Fatalf("%d crashes kept, want 2", len(ids))
	}
	refused, _ := crash.Load(store, ids[0])
	if len(refused.Notified) != 2 || refused.Notified[0].OK || !strings.Contains(refused.Notified[0].Error, "not https") ||
		refused.Notified[1].OK || !strings.Contains(refused.Notified[1].Error, "STARTTLS") {
		t.Errorf("without --insecure-notify: notifications %+v, want both refused", refused.Notified)
	}
	b, _ := os.ReadFile(filepath.Join(store, ids[1], "report.json"))
	if !strings.Contains(string(b), marker) {
		t.Fatalf("setup: the local report lacks the environment marker")
	}
	posted := posts()
	if len(posted) != 1 || len(mails()) != 1 {
		t.Fatalf("with --insecure-notify: %d posts and %d mails, want 1 each (and none before)", len(posted), len(mails()))
	}
	if strings.Contains(posted[0], marker) || strings.Contains(mails()[0], marker) {
		t.Errorf("the process's environment left the host in a notification")
	}
}

// TestHostileLibraryReplaced: exec and alloc used to call functions at
// addresses taken from the libruby now at the mapped path, not the one
// mapped: after another build is renamed over it (an upgrade does this to
// every running Ruby), they jumped into the wrong code. They must call
// the mapped library's functions.
func TestHostileLibraryReplaced(t *testing.T) {
	other := ""
	libs, _ := filepath.Glob("/var/cache/rbscope/rubies/*-shared/lib/libruby.so.*.*.*")
	for _, l := range libs {
		if st, err := os.Lstat(l); err == nil && st.Mode().IsRegular() {
			other = l
			break
		}
	}
	if other == "" {
		testruby.Missing(t, "no other libruby build in the cache to rename over the target's (make rubies)")
	}
	h := startHostile(t, `STDOUT.puts :ready; STDOUT.flush; sleep`)
	b, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	tmp := h.lib + ".new"
	if err := errors.Join(os.WriteFile(tmp, b, 0o755), os.Chown(tmp, int(h.nobody.Uid), int(h.nobody.Gid)), os.Rename(tmp, h.lib)); err != nil {
		t.Fatal(err)
	}
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", h.pid()))
	if !strings.Contains(string(maps), h.lib+" (deleted)") {
		t.Fatalf("setup: the target's libruby is not replaced on disk:\n%s", maps)
	}
	out, code, timedOut := runBounded(t, 60*time.Second, nil, "exec", "-p", strconv.Itoa(h.pid()), "6 * 7")
	if timedOut || code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("exec after the library was replaced: exit %d (timed out %v): %s", code, timedOut, out)
	}
	out, code, timedOut = runBounded(t, 60*time.Second, nil, "alloc", "-p", strconv.Itoa(h.pid()), "-d", "1s")
	if timedOut || code != 0 {
		t.Errorf("alloc after the library was replaced: exit %d (timed out %v): %s", code, timedOut, out)
	}
	// Once alloc has its answer the program may still be returning from
	// the code that wrote it: it must go back to sleep, and never be left
	// stopped.
	st := processState(t, h.pid())
	for deadline := time.Now().Add(20 * time.Second); st != "S" && st != "t" && st != "T" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		st = processState(t, h.pid())
	}
	if st != "S" {
		t.Errorf("the target is in state %s after exec and alloc, not sleeping", st)
	}
}
