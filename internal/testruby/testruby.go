// Package testruby finds the Rubies installed for testing and runs Ruby
// programs from testdata/ that report on themselves, for tests that compare
// what rbscope reads from outside with what the program knows.
package testruby

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Ruby is one Ruby installation.
type Ruby struct {
	// Name says which Ruby it is: "debian-3.1.7", "ruby-3.1-shared", ...
	Name string
	Bin  string
	// Env is added to the environment of the programs it runs (an
	// allocator preloaded: see WithJemalloc).
	Env []string
	// Emulator, when set, is the command line that runs Bin (qemu-user
	// and its sysroot for another architecture's Ruby: see Arm64), and
	// Sysroot the directory that holds that Ruby's files at their paths.
	Emulator []string
	Sysroot  string
	// Stripped is set for a Ruby without debug information, which
	// rbscope reads through its built-in tables: Debian's own Rubies
	// (/usr/bin/ruby, a Ruby unpacked from Debian's binary packages,
	// the arm64 one) and the matrix's stripped copies of its builds.
	// Every other Ruby of the matrix is a debug build, read through its
	// DWARF.
	Stripped bool
}

// Command is the command that runs the Ruby with args.
func (r Ruby) Command(args ...string) *exec.Cmd {
	if len(r.Emulator) > 0 {
		return exec.Command(r.Emulator[0], append(append(append([]string(nil), r.Emulator[1:]...), r.Bin), args...)...)
	}
	return exec.Command(r.Bin, args...)
}

// Arm64Sysroot is where scripts/arm64-sysroot.sh unpacks Debian's arm64
// Ruby ($RBSCOPE_ARM64_SYSROOT, default /var/cache/rbscope/arm64/sysroot).
func Arm64Sysroot() string {
	return EnvOr("RBSCOPE_ARM64_SYSROOT", "/var/cache/rbscope/arm64/sysroot")
}

// Arm64 is Debian's arm64 Ruby 3.1 (stripped, read with the built-in
// aarch64 table) run under qemu-aarch64-static from its sysroot: the
// process is the emulator, and its memory is the arm64 Ruby's at the
// guest's addresses. A missing sysroot or emulator is Missing.
func Arm64(t testing.TB) Ruby {
	t.Helper()
	root := Arm64Sysroot()
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		Missing(t, "qemu-aarch64-static is not installed (make deps installs qemu-user-static)")
		return Ruby{}
	}
	if _, err := os.Stat(filepath.Join(root, ".rbscope-complete")); err != nil {
		Missing(t, "no arm64 sysroot at %s (scripts/arm64-sysroot.sh makes it)", root)
		return Ruby{}
	}
	return Ruby{Name: "debian-aarch64-3.1-qemu", Bin: filepath.Join(root, "usr/bin/ruby3.1"),
		Emulator: []string{qemu, "-L", root}, Sysroot: root, Stripped: true}
}

// FilterEnv names the environment variable that, when set, is a regular
// expression a Ruby's name must match for Rubies to list it (to run the
// tests on some Rubies only, while working on them).
const FilterEnv = "RBSCOPE_RUBY_FILTER"

// JemallocLib is Debian's libjemalloc2, which Rails' generated Dockerfile
// and many deployments preload.
const JemallocLib = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

// WithJemalloc returns rubies followed by each of them again with
// JemallocLib preloaded (named "+jemalloc").
func WithJemalloc(t testing.TB, rubies []Ruby) []Ruby {
	t.Helper()
	if _, err := os.Stat(JemallocLib); err != nil {
		Missing(t, "%s (make deps installs libjemalloc2)", JemallocLib)
		return rubies
	}
	out := append([]Ruby(nil), rubies...)
	for _, rb := range rubies {
		if strings.Contains(rb.Name, "jemalloc") || strings.Contains(rb.Name, "musl") {
			continue // already on jemalloc, or on a C library it was not built for
		}
		rb.Name += "+jemalloc"
		rb.Env = append(append([]string(nil), rb.Env...), "LD_PRELOAD="+JemallocLib)
		if matches(rb.Name) {
			out = append(out, rb)
		}
	}
	return out
}

// matches reports whether a Ruby's name passes FilterEnv.
func matches(name string) bool {
	f := os.Getenv(FilterEnv)
	if f == "" {
		return true
	}
	ok, err := regexp.MatchString(f, name)
	return err == nil && ok
}

// PackagesFile is the file, beside a cached Ruby's bin directory, that
// lists the Debian packages it was unpacked from
// (scripts/debian-ruby-sysroot.sh): such a Ruby is Debian's binary, as
// Debian ships it, not a build of the matrix.
const PackagesFile = ".rbscope-packages"

// Rubies lists Debian's /usr/bin/ruby and every Ruby under the cache
// directory ($RBSCOPE_RUBIES, default /var/cache/rbscope/rubies): the
// builds of scripts/build-ruby.sh and Debian's binary Rubies unpacked by
// scripts/debian-ruby-sysroot.sh (whose bin/ruby runs Debian's ruby
// through the dynamic linker of the C library unpacked with it). Without
// any Ruby the test fails: the README's test command installs one.
func Rubies(t testing.TB) []Ruby {
	t.Helper()
	var out []Ruby
	if _, err := os.Stat("/usr/bin/ruby"); err == nil {
		v, err := exec.Command("/usr/bin/ruby", "-e", "print RUBY_VERSION").Output()
		if err == nil && matches("debian-"+string(v)) {
			out = append(out, Ruby{Name: "debian-" + string(v), Bin: "/usr/bin/ruby", Stripped: true})
		}
	}
	dir := os.Getenv("RBSCOPE_RUBIES")
	if dir == "" {
		dir = "/var/cache/rbscope/rubies"
	}
	builds, _ := filepath.Glob(filepath.Join(dir, "*", "bin", "ruby"))
	sort.Strings(builds)
	for _, b := range builds {
		root := filepath.Dir(filepath.Dir(b))
		if strings.HasSuffix(root, ".tmp") {
			continue // a build being made (build-ruby.sh renames it when done)
		}
		if _, err := os.Stat(filepath.Join(root, ".rbscope-complete")); err != nil {
			continue
		}
		name := filepath.Base(root)
		if !matches(name) {
			continue
		}
		_, err := os.Stat(filepath.Join(root, PackagesFile))
		packaged := err == nil
		out = append(out, Ruby{Name: name, Bin: b, Stripped: packaged || strings.HasSuffix(name, "-stripped")})
	}
	if len(out) == 0 && os.Getenv(FilterEnv) != "" {
		t.Fatalf("no Ruby's name matches %s=%q", FilterEnv, os.Getenv(FilterEnv))
	}
	if len(out) == 0 {
		t.Fatal("no Ruby found: install Debian's ruby (apt-get install ruby) or build one with scripts/build-ruby.sh")
	}
	return out
}

// Testdata returns the absolute path of a file under the repository's
// testdata directory.
func Testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", name)
}

// Process is a running Ruby program started by Start.
type Process struct {
	Cmd    *exec.Cmd
	Report string // path of the report file the program writes
	stderr *strings.Builder
}

// PID returns the process ID.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Start runs ruby script args..., passing a fresh report path as the first
// argument, and arranges for the process to be killed when the test ends.
func Start(t testing.TB, rb Ruby, script string, env []string, args ...string) *Process {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := rb.Command(append([]string{Testdata(script), report}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	cmd.Env = append(append(os.Environ(), rb.Env...), env...)
	DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s %s: %v", rb.Bin, script, err)
	}
	p := &Process{Cmd: cmd, Report: report, stderr: &stderr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// WaitReport waits for the program's report file and decodes it into v.
func (p *Process) WaitReport(t testing.TB, v any, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(p.Report)
		if err == nil {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("report %s: %v", p.Report, err)
			}
			return
		}
		if p.Cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("no report from pid %d within %v; output:\n%s", p.PID(), timeout, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Output returns what the program printed so far.
func (p *Process) Output() string { return p.stderr.String() }

// String describes the Ruby for test names.
func (r Ruby) String() string { return fmt.Sprintf("%s(%s)", r.Name, r.Bin) }

// Gcore writes a core file of the running process pid with gdb's gcore, in
// a directory removed when the test ends, and returns its path. The test is
// skipped when gcore is not installed.
func Gcore(t testing.TB, pid int) string {
	t.Helper()
	if _, err := exec.LookPath("gcore"); err != nil {
		Missing(t, "gcore (gdb) is not installed")
	}
	prefix := filepath.Join(t.TempDir(), "core")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "gcore", "-o", prefix, strconv.Itoa(pid)).CombinedOutput()
	path := prefix + "." + strconv.Itoa(pid)
	if _, serr := os.Stat(path); err != nil || serr != nil {
		t.Fatalf("gcore %d: %v %v\n%s", pid, err, serr, out)
	}
	return path
}

// corePatternLock is the lock file that serialises, across test packages
// and processes, the tests that change kernel.core_pattern.
const corePatternLock = "/tmp/rbscope-core_pattern.lock"

// LockCorePattern holds an exclusive lock, until the test ends, that every
// test changing kernel.core_pattern takes first, so that two of them never
// save and restore each other's value.
func LockCorePattern(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(corePatternLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("core_pattern lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("core_pattern lock: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// CorePatternPath is the kernel's core_pattern knob.
const CorePatternPath = "/proc/sys/kernel/core_pattern"

// SetCorePattern sets kernel.core_pattern for the test, under
// LockCorePattern, and restores the old value when the test ends, whether
// it passed or not. It skips the test when not root or the knob cannot be
// written.
func SetCorePattern(t testing.TB, pattern string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "setting kernel.core_pattern needs root")
	}
	LockCorePattern(t)
	old, err := os.ReadFile(CorePatternPath)
	if err != nil {
		t.Skipf("no %s: %v", CorePatternPath, err)
	}
	if err := os.WriteFile(CorePatternPath, []byte(pattern), 0o644); err != nil {
		t.Skipf("cannot set %s: %v", CorePatternPath, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(CorePatternPath, old, 0o644); err != nil {
			t.Errorf("restoring %s to %q: %v", CorePatternPath, old, err)
		}
	})
}

// CopyPrefix writes the first size(len) bytes of the file from to the file
// to, and returns to: a truncated copy, as a core cut short by a full disk.
func CopyPrefix(t testing.TB, from, to string, size func(int64) int64) string {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b[:size(int64(len(b)))], 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// Half is a size for CopyPrefix.
func Half(n int64) int64 { return n / 2 }

// LabelMatches reports whether got, a frame label rbscope printed, is the
// label want that a program running Ruby version printed for the same
// frame. rbscope labels frames as Ruby 3.4 does on every version; Rubies
// before 3.4 print methods unqualified, so there got may add the owner
// (Foo#bar, Foo.bar, block in Foo#bar) to want's method name.
func LabelMatches(version, got, want string) bool {
	if got == want {
		return true
	}
	if major, minor, ok := versionMinor(version); !ok || major > 3 || (major == 3 && minor >= 4) {
		return false
	}
	prefix, name := "", want
	if i := strings.LastIndex(want, " in "); i >= 0 && strings.HasPrefix(want, "block") {
		prefix, name = want[:i+4], want[i+4:]
	}
	rest, ok := strings.CutPrefix(got, prefix)
	if !ok || !strings.HasSuffix(rest, name) {
		return false
	}
	owner := strings.TrimSuffix(rest, name)
	return len(owner) > 1 && (strings.HasSuffix(owner, "#") || strings.HasSuffix(owner, ".")) && !strings.ContainsAny(owner[:len(owner)-1], " #")
}

func versionMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	return a, b, err1 == nil && err2 == nil
}

// Variant is a way of running a Ruby the tests must also pass under: YJIT
// on, or M:N threads.
type Variant struct {
	Name string   // "" for the plain run, "yjit", "mn"
	Env  []string // the environment that turns it on
}

// Variants lists the plain run of rb and, where rb has them, YJIT (a
// Ruby built with it, 3.3+ in the matrix) and M:N threads (3.3+). Each is
// checked by asking the Ruby, never assumed from its name.
func Variants(t testing.TB, rb Ruby) []Variant {
	t.Helper()
	out := []Variant{{}}
	probe := func(env []string, code string) bool {
		cmd := exec.Command(rb.Bin, "-e", code)
		cmd.Env = append(os.Environ(), env...)
		b, err := cmd.Output()
		return err == nil && strings.TrimSpace(string(b)) == "true"
	}
	yjit := []string{"RUBY_YJIT_ENABLE=1"}
	if probe(yjit, `print(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? true : false)`) {
		out = append(out, Variant{Name: "yjit", Env: yjit})
	}
	if major, minor, ok := versionMinor(Version(rb)); ok && (major > 3 || (major == 3 && minor >= 3)) {
		out = append(out, Variant{Name: "mn", Env: []string{"RUBY_MN_THREADS=1"}})
	}
	return out
}

// Version asks rb for its RUBY_VERSION ("" when it cannot run).
func Version(rb Ruby) string {
	b, _ := exec.Command(rb.Bin, "-e", "print RUBY_VERSION").Output()
	return strings.TrimSpace(string(b))
}

// Older reports whether rb is older than major.minor.
func Older(rb Ruby, major, minor int) bool {
	a, b, ok := versionMinor(Version(rb))
	return ok && (a < major || (a == major && b < minor))
}

// StrictEnv names the variable that makes Missing fail instead of skip:
// `make test` sets it, since it provides everything a test needs (root,
// Debian's Ruby, gdb, tmux, valgrind, the built Rubies and the wasm
// modules), and a test skipped there would pass without testing anything.
const StrictEnv = "RBSCOPE_STRICT_TESTS"

// Missing skips the test for want of something the machine lacks, or
// fails it under StrictEnv.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(StrictEnv) != "" {
		t.Fatalf("missing, though make test provides it: "+format, args...)
	}
	t.Skipf(format, args...)
}

// Musl reports whether rb runs on musl's C library (RUBY_PLATFORM ends in
// -musl), as Alpine's Rubies and the matrix's ruby-*-musl builds do:
// their C library carries no unwind information for its C functions (a
// native walk stops in it), and their builds have no Fiddle.
func Musl(rb Ruby) bool {
	cmd := exec.Command(rb.Bin, "-e", "print RUBY_PLATFORM")
	cmd.Env = append(os.Environ(), rb.Env...)
	b, _ := cmd.Output()
	return strings.HasSuffix(strings.TrimSpace(string(b)), "-musl")
}

// StartReporting runs a test program (a C program's binary) with env added
// to its environment, and returns its PID and the lines it printed before
// the line "ready" (or "ready ..."); the program is killed when the test ends.
func StartReporting(t testing.TB, bin string, env ...string) (int, []string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	DieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	type result struct {
		lines []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "ready" || strings.HasPrefix(l, "ready ") {
				done <- result{lines, nil}
				return
			}
			lines = append(lines, sc.Text())
		}
		done <- result{nil, fmt.Errorf("%s ended before it was ready: %v", filepath.Base(bin), sc.Err())}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return cmd.Process.Pid, r.lines
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report within 60 s", filepath.Base(bin))
	}
	return 0, nil
}

// StartInline runs rb on program (ruby -e), which prints one line of JSON
// on its standard output, what it knows of itself, once it is ready, and
// then keeps running; it decodes that line into report and returns the
// process's PID. The process is killed when the test ends.
func StartInline(t testing.TB, rb Ruby, program string, report any) int {
	t.Helper()
	cmd := rb.Command("-e", program)
	cmd.Env = append(os.Environ(), rb.Env...)
	DieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", rb.Name, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s ended before its report: %v", rb.Name, err)
	}
	if err := json.Unmarshal([]byte(line), report); err != nil {
		t.Fatalf("%s's report %q: %v", rb.Name, line, err)
	}
	return cmd.Process.Pid
}
