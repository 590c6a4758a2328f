package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/unwind"
	"github.com/rbscope/rbscope/internal/wire"
)

// crashEnv installs the handler into a private store for one test and
// restores core_pattern and core_pipe_limit afterwards, even on failure.
func crashEnv(t *testing.T, extra ...string) (config, store string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to change core_pattern")
	}
	testruby.LockCorePattern(t) // released after the restore below
	pattern, _ := os.ReadFile(crash.CorePatternPath)
	limit, _ := os.ReadFile(crash.CorePipeLimitPath)
	t.Cleanup(func() {
		os.WriteFile(crash.CorePatternPath, pattern, 0o644)
		os.WriteFile(crash.CorePipeLimitPath, limit, 0o644)
	})
	// core_pattern holds 127 bytes: keep the config path short.
	dir, err := os.MkdirTemp("/tmp", "rbc")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o700)
	t.Cleanup(func() { os.RemoveAll(dir) })
	config, store = filepath.Join(dir, "c.json"), filepath.Join(dir, "s")
	args := append([]string{"crash", "install", "--config", config, "--dir", store}, extra...)
	if out, errOut, code := rbscope(t, args...); code != 0 {
		t.Fatalf("install: exit %d: %s %s", code, out, errOut)
	}
	return config, store
}

func waitReport(t *testing.T, store string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var done []string
		ids, _ := crash.List(store)
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(store, id, "report.txt")); err == nil {
				done = append(done, id)
			}
		}
		if len(done) >= n {
			return done
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("fewer than %d crash reports in %s after 30s", n, store)
	return nil
}

// TestCrashRealRubyCrash: a Ruby that segfaults in native code gets a
// report whose Ruby stacks match what it recorded before crashing, with its
// other thread by name, and its core kept compressed.
func TestCrashRealRubyCrash(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			config, store := crashEnv(t)
			report := filepath.Join(t.TempDir(), "expected.json")
			// The handler honours RLIMIT_CORE, whose soft limit is often 0.
			cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$0" "$@"`, rb.Bin, testruby.Testdata("crash_fiddle.rb"), report)
			cmd.Run() // it crashes: a non-zero exit is the point
			var want struct {
				PID    int     `json:"pid"`
				Frames [][]any `json:"frames"`
				Other  string  `json:"other"`
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatalf("the crashing program wrote nothing: %v", err)
			}
			json.Unmarshal(b, &want)
			ids := waitReport(t, store, 1)
			r, err := crash.Load(store, ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if r.PID != want.PID || (r.SignalName != "SIGSEGV" && r.SignalName != "SIGABRT") {
				t.Errorf("report pid %d signal %s, want pid %d and SEGV/ABRT", r.PID, r.SignalName, want.PID)
			}
			if r.Ruby == nil {
				t.Fatalf("no Ruby state in the report; problems: %v", r.Problems)
			}
			var mainFrames []string
			var main []stacks.Frame
			other := false
			for _, th := range r.Ruby.Threads {
				if th.Name == want.Other {
					other = true
				}
				if th.Main {
					main = th.Frames
					for _, f := range th.Frames {
						mainFrames = append(mainFrames, fmt.Sprintf("%s|%s|%d", f.Label, f.Path, f.Line))
					}
				}
			}
			if !other {
				t.Errorf("thread %q missing from the report", want.Other)
			}
			var wantFrames []string
			for _, w := range want.Frames {
				wantFrames = append(wantFrames, fmt.Sprintf("%s|%s|%d", w[0], w[1], int(w[2].(float64))))
			}
			// rbscope also shows the C method that crashed, above them,
			// and labels frames as Ruby 3.4 does (testruby.LabelMatches).
			same := len(main) == len(want.Frames)+1 && len(main) > 0 && strings.HasSuffix(mainFrames[0], "#[]||0")
			for i := 0; same && i < len(want.Frames); i++ {
				w, g := want.Frames[i], main[i+1]
				label, _ := w[0].(string)
				path, _ := w[1].(string)
				line, _ := w[2].(float64)
				same = testruby.LabelMatches(r.Ruby.Version, g.Label, label) && g.Path == path && g.Line == int(line)
			}
			if !same {
				t.Errorf("main thread frames:\n%s\nwant Fiddle::Pointer#[] above:\n%s", strings.Join(mainFrames, "\n"), strings.Join(wantFrames, "\n"))
			}
			if r.Registers == nil || r.Registers.PC() == 0 || len(r.Native) < 2 {
				t.Errorf("registers %v, %d native threads", r.Registers, len(r.Native))
			}
			tids := map[int]bool{}
			for _, nt := range r.Native {
				if tids[nt.TID] {
					t.Errorf("native thread %d is in the report twice", nt.TID)
				}
				tids[nt.TID] = true
			}
			if testruby.Musl(rb) {
				// Ruby's handler re-raises the signal: on musl the walk
				// stops in the C library's raise, which has no call frame
				// information, above the signal frame that holds the
				// fault; the crashing thread's walk says so.
				var crashing crashreport.NativeThread
				for _, nt := range r.Native {
					if nt.TID == r.TID {
						crashing = nt
					}
				}
				if !strings.Contains(crashing.Error, "musl's C library has call frame information for none") {
					t.Errorf("crashing thread %d: native walk ended with %q, want musl's C library named", r.TID, crashing.Error)
				}
				checkCore(t, filepath.Join(store, ids[0], "core.zst"))
			} else {
				// The fault beneath Ruby's SIGSEGV handler: Fiddle read address 16.
				if !strings.HasPrefix(r.Fault, "SIGSEGV at 0x10 in ") || r.SignalName == "SIGABRT" && !strings.Contains(r.Fault, "SIGABRT") {
					t.Errorf("fault %q (the process ended with %s), want SIGSEGV at 0x10 named", r.Fault, r.SignalName)
				}
				checkCore(t, filepath.Join(store, ids[0], "core.zst"))
				compareCrashWithGDB(t, r, filepath.Join(store, ids[0], "core.zst"))
			}
			st, _ := os.Stat(filepath.Join(store, ids[0], "report.json"))
			if st.Mode().Perm() != 0o600 {
				t.Errorf("report.json mode %v, want 0600", st.Mode().Perm())
			}
			out, _, code := rbscope(t, "crash", "list", "--config", config)
			if code != 0 || !strings.Contains(out, ids[0]) || !strings.Contains(out, "Fiddle::Pointer#[]") {
				t.Errorf("crash list:\n%s", out)
			}
		})
	}
}

// TestCrashCoreLimitZero: a process whose RLIMIT_CORE is 0 still gets its
// report (the kernel pipes its core all the same), but no core is kept,
// and the report says why.
func TestCrashCoreLimitZero(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	_, store := crashEnv(t)
	report := filepath.Join(t.TempDir(), "expected.json")
	cmd := exec.Command("sh", "-c", `ulimit -c 0 && exec "$0" "$@"`, rb.Bin, testruby.Testdata("crash_fiddle.rb"), report)
	cmd.Env = append(os.Environ(), "RBSCOPE_KEEP_CORE_LIMIT=1")
	cmd.Run() // it crashes
	if _, err := os.Stat(report); err != nil {
		t.Fatalf("setup: the crashing program wrote nothing: %v", err)
	}
	ids := waitReport(t, store, 1)
	r, err := crash.Load(store, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Ruby == nil || len(r.Ruby.Threads) == 0 {
		t.Errorf("no Ruby threads in the report of a process with RLIMIT_CORE 0; problems: %v", r.Problems)
	}
	if !strings.Contains(r.Core.NotStored, "RLIMIT_CORE") || r.Core.File != "" {
		t.Errorf("core: %+v, want none stored because of RLIMIT_CORE", r.Core)
	}
	if _, err := os.Stat(filepath.Join(store, ids[0], "core.zst")); !os.IsNotExist(err) {
		t.Errorf("core.zst kept for a process with RLIMIT_CORE 0: %v", err)
	}
}

// openZst opens a kept core.zst for reading, decompressed; both are closed
// when the test ends.
func openZst(t *testing.T, path string) io.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zr.Close)
	return zr
}

// compareCrashWithGDB checks the crashing thread's native frames in the
// report against gdb's on the kept core: the same pc, frame by frame.
func compareCrashWithGDB(t *testing.T, r *crashreport.Report, zst string) {
	t.Helper()
	zr := openZst(t, zst)
	core := filepath.Join(t.TempDir(), "core")
	out, err := os.Create(core)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	out.Close()
	// gdb reads the core with the program the process ran, as the report
	// names it: Ruby's executable, or the dynamic linker that ran it
	// (ruby-3.4.11-debian's bin/ruby execs its sysroot's ld.so).
	if r.Exe == "" {
		t.Fatal("the report names no executable")
	}
	c, err := target.OpenCore(core, target.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	maps, err := c.Mappings()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := gdbFrames(t, append([]string{r.Exe, core}, gdbProgramArgs(t, r.Exe, maps)...)...)[r.TID]
	var got []unwind.Frame
	for _, nt := range r.Native {
		if nt.TID == r.TID {
			got = nt.Frames
		}
	}
	if len(want) < 3 || len(got) < len(want)-1 || len(got) > len(want)+1 {
		t.Fatalf("crashing thread %d: %d native frames in the report, gdb %d on its core\nreport: %v\ngdb: %v", r.TID, len(got), len(want), got, want)
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i].PC != want[i].pc {
			t.Errorf("crashing thread frame %d: %#x %s, gdb %#x %s", i, got[i].PC, got[i].Name(), want[i].pc, want[i].name)
			return
		}
	}
	// rbscope core --native on the same core: the same frames, the same
	// fault.
	stdout, errOut, code := rbscope(t, "core", "--native", "--json", core)
	if code != 0 {
		t.Fatalf("core --native: exit %d: %s", code, errOut)
	}
	var d struct {
		Fault   string
		Threads []wire.NativeThread
	}
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.Fault != r.Fault {
		t.Errorf("core --native names the fault %q, the report %q", d.Fault, r.Fault)
	}
	for _, th := range d.Threads {
		if th.TID == r.TID {
			compareWithGDB(t, th, want)
			return
		}
	}
	t.Errorf("core --native lists no thread %d", r.TID)
}

// checkCore decompresses a kept core and checks it is an ELF core.
func checkCore(t *testing.T, path string) {
	t.Helper()
	zr := openZst(t, path)
	head := make([]byte, 18)
	if _, err := io.ReadFull(zr, head); err != nil {
		t.Fatalf("core.zst: %v", err)
	}
	if string(head[:4]) != "\x7fELF" || head[16] != 4 { // e_type ET_CORE
		t.Errorf("core.zst does not hold an ELF core: % x", head)
	}
}

// handle runs `rbscope crash handle` as the kernel would, with stdin.
func handle(t *testing.T, config string, stdin io.Reader, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(rbscopeBin, append([]string{"crash", "handle", "--config", config}, args...)...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err) // rbscope did not run at all: no exit status to report
	}
	return string(out), 0
}

// TestCrashHandleInputs feeds the handler directly: a core of a process
// that is gone, a truncated core, something that is not a core, several at
// once, and a core larger than the cap; it notifies a local webhook and a
// local SMTP server.
func TestCrashHandleInputs(t *testing.T) {
	webURL, posts := fakeWebhook(t)
	smtpAddr, mails := fakeSMTP(t)
	config, store := crashEnv(t, "--webhook", webURL, "--email", "ops@example.test", "--smtp", smtpAddr, "--max-core", "100000", "--insecure-notify")

	// A real core: gcore of a sleeping Ruby.
	rb := testruby.Rubies(t)[0]
	sleeper := exec.Command(rb.Bin, "-e", "sleep")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	corePath := testruby.Gcore(t, sleeper.Process.Pid)
	sleeper.Process.Kill()
	sleeper.Wait()
	core, err := os.ReadFile(corePath)
	if err != nil {
		t.Fatal(err)
	}

	now := fmt.Sprint(time.Now().Unix())
	gone := fmt.Sprint(sleeper.Process.Pid)
	inputs := map[string][]byte{"full": core, "truncated": core[:len(core)/2], "garbage": []byte("this is not a core file")}
	var wg sync.WaitGroup
	for name, in := range inputs {
		wg.Add(1)
		go func(name string, in []byte) { // concurrent crashes
			defer wg.Done()
			if out, code := handle(t, config, bytes.NewReader(in), gone, gone, "11", now); code != 0 {
				t.Errorf("%s: exit %d: %s", name, code, out)
			}
		}(name, in)
	}
	wg.Wait()
	ids := waitReport(t, store, 3)
	if len(ids) != 3 {
		t.Fatalf("%d reports for 3 crashes: %v", len(ids), ids)
	}
	read := map[int64]bool{} // the inputs, by their size, that a report read whole
	for _, id := range ids {
		r, err := crash.Load(store, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.SignalName != "SIGSEGV" || r.PID != sleeper.Process.Pid {
			t.Errorf("%s: signal %s pid %d", id, r.SignalName, r.PID)
		}
		read[r.Core.Bytes] = true
		switch r.Core.Bytes {
		case int64(len(core)):
			if r.Registers == nil || r.Registers.PC() == 0 {
				t.Errorf("full core: no registers; problems %v", r.Problems)
			}
			if !r.Core.Truncated || r.Core.Stored == 0 {
				t.Errorf("a core over --max-core was not marked truncated: %+v", r.Core)
			}
		case int64(len(inputs["truncated"])):
			// gcore writes the notes after the memory: half a core has none.
			if r.Registers != nil || !strings.Contains(strings.Join(r.Problems, " "), "registers") {
				t.Errorf("half a gcore core: registers %v problems %v", r.Registers, r.Problems)
			}
		case int64(len(inputs["garbage"])):
			if r.Registers != nil || !strings.Contains(strings.Join(r.Problems, " "), "registers") {
				t.Errorf("garbage input: registers %v problems %v", r.Registers, r.Problems)
			}
		}
		if len(r.Notified) != 2 || !r.Notified[0].OK || !r.Notified[1].OK {
			t.Errorf("%s: notifications %+v", id, r.Notified)
		}
	}
	for name, in := range inputs {
		if !read[int64(len(in))] {
			t.Errorf("no report read the %s input whole (%d bytes)", name, len(in))
		}
	}
	if posted := posts(); len(posted) != 3 || !strings.Contains(posted[0], `"signal_name":"SIGSEGV"`) {
		t.Errorf("webhook got %d posts", len(posted))
	}
	if n := len(mails()); n != 3 {
		t.Errorf("SMTP server got %d mails, want 3", n)
	}
}

// fakeSMTP serves just enough SMTP on loopback to accept mail.
// fakeWebhook serves an http webhook for one test; posts returns the
// bodies posted so far.
func fakeWebhook(t *testing.T) (url string, posts func() []string) {
	var mu sync.Mutex
	var posted []string
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, string(b))
		mu.Unlock()
	}))
	t.Cleanup(web.Close)
	return web.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), posted...)
	}
}

func fakeSMTP(t *testing.T) (string, func() []string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var got []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				r := bufio.NewReader(c)
				fmt.Fprint(c, "220 test ESMTP\r\n")
				var data strings.Builder
				inData := false
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if inData {
						if line == ".\r\n" {
							inData = false
							mu.Lock()
							got = append(got, data.String())
							mu.Unlock()
							fmt.Fprint(c, "250 ok\r\n")
							continue
						}
						data.WriteString(line)
						continue
					}
					switch cmd := strings.ToUpper(strings.Fields(line + " x")[0]); cmd {
					case "EHLO", "HELO":
						fmt.Fprint(c, "250 test\r\n")
					case "DATA":
						inData = true
						fmt.Fprint(c, "354 go\r\n")
					case "QUIT":
						fmt.Fprint(c, "221 bye\r\n")
						return
					default:
						fmt.Fprint(c, "250 ok\r\n")
					}
				}
			}(c)
		}
	}()
	return ln.Addr().String(), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

func TestCrashInstallErrors(t *testing.T) {
	config, _ := crashEnv(t)
	if _, errOut, code := rbscope(t, "crash", "install", "--config", config, "--dir", "/tmp/x"); code != 1 || !strings.Contains(errOut, "already installed") {
		t.Errorf("second install: exit %d %q", code, errOut)
	}
	out, _, _ := rbscope(t, "crash", "status", "--config", config)
	if !strings.HasPrefix(out, "installed:") {
		t.Errorf("status: %q", out)
	}
	if _, errOut, code := rbscope(t, "crash", "uninstall", "--config", config); code != 0 {
		t.Errorf("uninstall: exit %d %q", code, errOut)
	}
	if _, errOut, code := rbscope(t, "crash", "uninstall", "--config", config); code != 1 || !strings.Contains(errOut, "no rbscope crash handler is installed") {
		t.Errorf("uninstall when not installed: exit %d %q", code, errOut)
	}
	os.Chmod(filepath.Dir(rbscopeBin), 0o755)
	cmd := exec.Command(rbscopeBin, "crash", "install", "--config", config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "run it as root") {
		t.Errorf("install as nobody: %q", out)
	}
	// A store that others can write is refused.
	bad := filepath.Join(filepath.Dir(config), "open")
	os.Mkdir(bad, 0o777)
	os.Chmod(bad, 0o777)
	if _, errOut, code := rbscope(t, "crash", "install", "--config", config, "--dir", bad); code != 1 || !strings.Contains(errOut, "writable by others") {
		t.Errorf("world-writable store: exit %d %q", code, errOut)
	}
}

// TestCrashHandleOddCoreLimit: %c is the crashing process's own
// RLIMIT_CORE, printed unsigned; a value above 2^63 (or anything odd in
// the four optional arguments) must not cost the crash its report.
func TestCrashHandleOddCoreLimit(t *testing.T) {
	config, store := crashEnv(t)
	pid := fmt.Sprint(testruby.NoSuchPID())
	now := fmt.Sprint(time.Now().Unix())
	for _, limit := range []string{"9223372036854775808", "x"} {
		if out, code := handle(t, config, strings.NewReader("not a core"), pid, pid, "11", now, limit, "1", "0", "0"); code != 0 {
			t.Errorf("%%c %s: exit %d: %s", limit, code, out)
		}
	}
	if ids, _ := crash.List(store); len(ids) != 2 {
		t.Errorf("%d reports kept, want 2", len(ids))
	}
}
