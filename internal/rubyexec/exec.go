// Package rubyexec runs Ruby code inside a live Ruby process, at a safe
// point, without any gem or cooperation from the program.
//
// The route: rbscope pauses the process's main thread with ptrace, maps one
// page into the process with an injected mmap system call, writes a small
// Ruby program there, and calls rb_postponed_job_register_one(0,
// rb_eval_string, page) on the borrowed thread (the function is
// async-signal-safe by design, so any instruction is a safe place to call
// it). Every register is then put back and the thread resumed. The VM runs
// the job at its next interrupt check, on a Ruby thread holding the GVL,
// outside GC and signal handlers. The program it runs rescues every
// exception, so nothing escapes into the application, and writes its answer
// to a private directory that rbscope reads.
//
// A process whose Ruby threads all sleep checks interrupts only when woken:
// rbscope then sends it SIGCHLD, which Ruby handles itself (a no-op for a
// program that does not trap CHLD) by waking the main thread.
package rubyexec

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// Errors callers tell apart.
var (
	// ErrNoSafePoint means the code had not started when the timeout ran out.
	ErrNoSafePoint = errors.New("the process did not reach a safe point")
	// ErrStillRunning means the code started but had not finished in time.
	ErrStillRunning = errors.New("the code did not finish")
	// ErrCanceled means Options.Cancel ended the wait.
	ErrCanceled = errors.New("interrupted")
)

// errQueued means Ruby 3.1 refused the job: one for rb_eval_string is
// queued already.
var errQueued = errors.New("a job for rb_eval_string is queued already")

// DefaultTimeout is how long Run waits for the code's answer.
const DefaultTimeout = 10 * time.Second

// Options tune Run.
type Options struct {
	// Timeout bounds the wait for the answer (DefaultTimeout when zero).
	Timeout time.Duration
	// Name is the file name the code's backtraces show ("(rbscope exec)").
	Name string
	// Cancel, when closed, ends the wait early (rbscope interrupted): the
	// request is emptied as after a timeout, and Run returns ErrCanceled.
	Cancel <-chan struct{}
	// Raw returns the result's to_s instead of its inspect (for code that
	// builds a String answer for a program to read).
	Raw bool
}

// Result is what the code returned or raised.
type Result struct {
	// Value is the result's inspect (its to_s with Options.Raw), when the
	// code returned.
	Value string
	// Raised is set when the code raised.
	Raised *RubyError
	// Elapsed is the time from the request to the answer.
	Elapsed time.Duration
}

// RubyError is an exception the code raised inside the process.
type RubyError struct {
	Class     string
	Message   string
	Backtrace []string
}

func (e *RubyError) Error() string {
	if e.Message == "" {
		return e.Class
	}
	return fmt.Sprintf("%s: %s", e.Class, e.Message)
}

// Run evaluates code in the process of t (a live target whose VM is vm)
// with self the program's main object and the top-level locals visible,
// and returns its result's inspect or the exception it raised.
func Run(t *target.Live, vm *rubyvm.VM, code string, opt Options) (*Result, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Name == "" {
		opt.Name = "(rbscope exec)"
	}
	start := time.Now()
	register, evalString, err := jobFunctions(t, vm, "rb_eval_string")
	if err != nil {
		return nil, err
	}
	ex, err := NewExchange(t.PID())
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	prog := wrapper(ex.AnswerPath(), code, opt.Name, opt.Raw)
	page, err := postRetrying(t, register, evalString, prog, 0, start, opt.Timeout)
	if err != nil {
		return nil, err
	}
	res, err := ex.Await(t.PID(), start, opt.Timeout, opt.Cancel)
	if err != nil {
		if errors.Is(err, ErrCanceled) {
			err = fmt.Errorf("pid %d: %w before the code finished; the request was emptied if it had not started", t.PID(), ErrCanceled)
		}
		if errors.Is(err, ErrNoSafePoint) && running(vm, opt.Name) {
			err = fmt.Errorf("pid %d: %w within %v; it keeps running in the process, and its answer is dropped", t.PID(), ErrStillRunning, opt.Timeout)
		}
		// The job may still run later. The page it reads stays mapped, and
		// now holds a program that does nothing: Ruby stops reading source
		// at a NUL byte, so even a copy torn by this write runs either the
		// old program (whose answer goes nowhere) or nil.
		if !errors.Is(err, target.ErrExited) {
			_, _ = t.WriteAt([]byte("nil\x00"), page.addr)
		}
		return nil, err
	}
	res.Elapsed = time.Since(start)
	if uerr := unmap(t, page); uerr != nil {
		fmt.Fprintf(os.Stderr, "rbscope: warning: could not unmap the request page: %v\n", uerr)
	}
	return res, nil
}

// Invoke runs obj.inspect inside the process as a postponed job, with no
// code compiled (so nothing allocated) before the method starts; the
// method itself must write its answer with AnswerProgram to ex. obj is the
// address of a T_OBJECT that the program keeps alive and pinned (a global
// variable's value is pinned). The method runs in trap context: it must
// not lock a Mutex (nor require, log, or start threads through one).
func Invoke(t *target.Live, vm *rubyvm.VM, obj uint64, ex *Exchange, timeout time.Duration) (*Result, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	var flags [8]byte
	if err := target.ReadFull(t, flags[:], obj+uint64(vm.Layout.RBasicFlags)); err != nil {
		return nil, fmt.Errorf("pid %d: read the object at %#x: %w", t.PID(), obj, err)
	}
	if typ := int64(binary.LittleEndian.Uint64(flags[:])) & vm.Layout.TMask; typ != vm.Layout.TObject {
		return nil, fmt.Errorf("pid %d: the object at %#x is no longer there (its type is %s); was it collected or moved?", t.PID(), obj, vm.TypeName(typ))
	}
	register, inspect, err := jobFunctions(t, vm, "rb_inspect")
	if err != nil {
		return nil, err
	}
	if _, err := postRetrying(t, register, inspect, "", obj, start, timeout); err != nil {
		return nil, err
	}
	res, err := ex.Await(t.PID(), start, timeout, nil)
	if err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// jobFunctions returns the addresses of rb_postponed_job_register_one and
// of job, the function it is to queue.
func jobFunctions(t *target.Live, vm *rubyvm.VM, job string) (register, fn uint64, err error) {
	for _, s := range []struct {
		name string
		addr *uint64
	}{{"rb_postponed_job_register_one", &register}, {job, &fn}} {
		if *s.addr, _, err = vm.Image.Symbol(s.name); err != nil {
			return 0, 0, fmt.Errorf("pid %d: cannot run code: %w", t.PID(), err)
		}
	}
	return register, fn, nil
}

// postRetrying posts a job (see post), retrying while Ruby 3.1 refuses it
// because an earlier one for the same function is still queued.
func postRetrying(t *target.Live, register, fn uint64, prog string, data uint64, start time.Time, timeout time.Duration) (mapping, error) {
	m, err := post(t, register, fn, prog, data)
	for (errors.Is(err, errQueued) || errors.Is(err, target.ErrSegvBlocked)) && time.Since(start) < timeout {
		// An earlier request that timed out still waits for a safe point
		// (wake the process, then queue ours once that one has run and done
		// nothing), or the main thread runs a signal handler right now.
		if errors.Is(err, errQueued) {
			_ = unix.Tgkill(t.PID(), t.PID(), unix.SIGCHLD)
		}
		time.Sleep(50 * time.Millisecond)
		m, err = post(t, register, fn, prog, data)
	}
	if errors.Is(err, errQueued) {
		return mapping{}, fmt.Errorf("pid %d: %w within %v: an earlier request that timed out still waits for one", t.PID(), ErrNoSafePoint, timeout)
	}
	if errors.Is(err, target.ErrSegvBlocked) {
		return mapping{}, fmt.Errorf("pid %d: %w within %v: its main thread kept SIGSEGV blocked", t.PID(), ErrNoSafePoint, timeout)
	}
	return m, err
}

// running reports whether a thread of vm runs the code now: a frame of it
// (its file is name) is on a Ruby stack.
func running(vm *rubyvm.VM, name string) bool {
	vm.ForgetCaches()
	threads, err := vm.Threads()
	if err != nil {
		return false
	}
	for _, th := range threads {
		for _, f := range th.Frames {
			if f.Path == name {
				return true
			}
		}
	}
	return false
}

// mapping is a region rbscope mapped into the process.
type mapping struct{ addr, size uint64 }

// post registers the postponed job fn(data) on the paused main thread.
// With prog set, it first maps a page into the process and writes prog
// there, NUL-terminated, and the page is the job's data.
func post(t *target.Live, register, fn uint64, prog string, data uint64) (mapping, error) {
	pid := t.PID()
	if err := t.PauseThreads([]int{pid}); err != nil {
		t.Resume()
		return mapping{}, err
	}
	defer t.Resume()
	var m mapping
	unmapNow := func() {
		if m.size > 0 {
			t.Syscall(pid, unix.SYS_MUNMAP, m.addr, m.size)
		}
	}
	if prog != "" {
		size := uint64(len(prog)+1+4095) &^ 4095
		ret, err := t.Syscall(pid, unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
		if err != nil {
			return mapping{}, fmt.Errorf("pid %d: map a request page: %w", pid, err)
		}
		if ret < 0 && ret > -4096 {
			return mapping{}, fmt.Errorf("pid %d: map a request page: %w", pid, unix.Errno(-ret))
		}
		m = mapping{uint64(ret), size}
		if _, err := t.WriteAt(append([]byte(prog), 0), m.addr); err != nil {
			unmapNow()
			return mapping{}, fmt.Errorf("pid %d: write the request: %w", pid, err)
		}
		data = m.addr
	}
	r, err := t.Call(pid, register, 0, fn, data)
	if err != nil {
		unmapNow()
		return mapping{}, fmt.Errorf("pid %d: register the job: %w", pid, err)
	}
	switch uint32(r) {
	case 1:
		return m, nil
	case 2:
		// Ruby 3.1 keeps one job per function: an earlier request of rbscope
		// (one that timed out) is still queued, and would run instead.
		unmapNow()
		return mapping{}, errQueued
	default:
		unmapNow()
		return mapping{}, fmt.Errorf("pid %d: the VM's postponed-job table is full; try again later", pid)
	}
}

// unmap removes the request page once the job has run.
func unmap(t *target.Live, m mapping) error {
	pid := t.PID()
	if err := t.PauseThreads([]int{pid}); err != nil {
		t.Resume()
		return err
	}
	defer t.Resume()
	ret, err := t.Syscall(pid, unix.SYS_MUNMAP, m.addr, m.size)
	if err == nil && ret != 0 {
		err = unix.Errno(-ret)
	}
	return err
}

// Exchange is the private directory a job answers in, seen from rbscope
// and from the process (which may have another root). It belongs to the
// process's user, mode 0700.
type Exchange struct{ host, inProcess string }

// NewExchange creates an exchange directory under the /tmp of process pid.
func NewExchange(pid int) (*Exchange, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random name: %w", err)
	}
	name := "rbscope-exec-" + hex.EncodeToString(b[:])
	d := &Exchange{
		host:      filepath.Join(fmt.Sprintf("/proc/%d/root/tmp", pid), name),
		inProcess: "/tmp/" + name,
	}
	uid, gid, err := owner(pid)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(d.host, 0o700); err != nil {
		return nil, fmt.Errorf("pid %d: create the answer directory %s: %w (the process needs a writable /tmp)", pid, d.inProcess, err)
	}
	if err := os.Chown(d.host, uid, gid); err != nil {
		os.RemoveAll(d.host)
		return nil, fmt.Errorf("pid %d: give the answer directory %s to uid %d: %w", pid, d.inProcess, uid, err)
	}
	return d, nil
}

// AnswerPath is the answer file's path as the process sees it.
func (d *Exchange) AnswerPath() string { return d.inProcess + "/answer" }

// Close removes the directory; a job that answers later finds it gone.
func (d *Exchange) Close() error { return os.RemoveAll(d.host) }

// owner returns the effective uid and gid of pid.
func owner(pid int) (uid, gid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("pid %d: %w", pid, target.ErrExited)
	}
	field := func(name string) (int, error) {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, name+":"); ok {
				f := strings.Fields(rest)
				if len(f) >= 2 {
					return strconv.Atoi(f[1]) // real, effective, saved, fs
				}
			}
		}
		return 0, fmt.Errorf("pid %d: no %s in /proc status", pid, name)
	}
	if uid, err = field("Uid"); err != nil {
		return 0, 0, err
	}
	gid, err = field("Gid")
	return uid, gid, err
}

// wakeAfter is how long rbscope waits for the job to start before waking
// the main thread with SIGCHLD, and wakeEvery how often it repeats that.
const (
	wakeAfter = 20 * time.Millisecond
	wakeEvery = time.Second
)

// Await polls for the job's answer until timeout has passed since start
// or cancel is closed, waking the main thread while the answer is missing,
// and removes it.
func (d *Exchange) Await(pid int, start time.Time, timeout time.Duration, cancel <-chan struct{}) (*Result, error) {
	answer := filepath.Join(d.host, "answer")
	defer os.Remove(answer)
	nextWake := start.Add(wakeAfter)
	delay := 200 * time.Microsecond
	for {
		if b, err := os.ReadFile(answer); err == nil {
			if body, ok := complete(b); ok {
				return parseAnswer(body)
			}
		}
		if target.Exited(pid) {
			return nil, fmt.Errorf("pid %d exited before the code finished: %w", pid, target.ErrExited)
		}
		now := time.Now()
		if now.Sub(start) > timeout {
			return nil, fmt.Errorf("pid %d: %w within %v (a thread may be stuck in C code holding the GVL, or in a long GC); nothing was run, and the queued request was emptied", pid, ErrNoSafePoint, timeout)
		}
		if now.After(nextWake) {
			_ = unix.Tgkill(pid, pid, unix.SIGCHLD)
			nextWake = now.Add(wakeEvery)
		}
		select {
		case <-cancel:
			return nil, ErrCanceled
		case <-time.After(delay):
		}
		if delay < 5*time.Millisecond {
			delay *= 2
		}
	}
}

// complete returns the answer behind its length header once all of it has
// been written.
func complete(b []byte) ([]byte, bool) {
	n, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, false
	}
	size, err := strconv.Atoi(string(n))
	if err != nil || len(body) < size {
		return nil, false
	}
	return body[:size], true
}

// wrapper is the Ruby program the job evaluates. The job runs in "trap
// context", as a Signal.trap handler does, where Mutex#lock (and so
// require, Logger, Monitor) raises ThreadError; so the wrapper starts a
// thread, "rbscope-exec", and waits for it. That thread runs the user's
// code in a fresh binding under the top level. The code travels
// base64-encoded, so no quoting issue can break the wrapper, and the
// wrapper's own names start with __rbscope so the code cannot clash with
// them.
func wrapper(answer, code, name string, raw bool) string {
	enc := base64.StdEncoding.EncodeToString([]byte(code))
	show := "inspect"
	if raw {
		show = "to_s"
	}
	body := fmt.Sprintf(`Thread.new do
  Thread.current.name = "rbscope-exec"
  Thread.current.report_on_exception = false
  %s
end.value`, answerExpr(fmt.Sprintf(`__rbscope_v = TOPLEVEL_BINDING.eval("->{ binding }").call.eval(%q.unpack1("m0").force_encoding(Encoding::UTF_8), %q, 1)
    begin; __rbscope_v.%s.to_s; rescue Exception => __rbscope_ie; "#<%s raised #{__rbscope_ie.class}>"; end`, enc, name, show, show)))
	return fmt.Sprintf("->{ %s }.call\nnil\n", writeAnswer(answer, body))
}

// AnswerProgram returns Ruby code that evaluates body, an expression whose
// value's to_s is the answer, and writes that answer (or the exception body
// raised) to path, the way Await reads it. It never raises: a failure to
// write (rbscope gone, and its directory with it) is swallowed too.
func AnswerProgram(path, body string) string {
	return writeAnswer(path, answerExpr(body))
}

// answerExpr is a Ruby expression: "ok\n" and body's value, or "error\n",
// the class, the message's size and the message and backtrace of what it
// raised.
func answerExpr(body string) string {
	return fmt.Sprintf(`begin
    __rbscope_r = (%s).to_s
    "ok\n".b + __rbscope_r.b
  rescue Exception => __rbscope_e
    __rbscope_m = (__rbscope_e.message.to_s rescue "").b
    "error\n#{__rbscope_e.class.name.to_s.b}\n#{__rbscope_m.bytesize}\n".b + __rbscope_m + Array(__rbscope_e.backtrace).join("\n").b
  end`, body)
}

// writeAnswer writes answer (a Ruby expression) behind a length header,
// with one write: every file operation releases the GVL, which costs a
// time slice when another thread is busy.
func writeAnswer(path, answer string) string {
	return fmt.Sprintf(`begin
  __rbscope_a = %s
  File.binwrite(%q, "#{__rbscope_a.bytesize}\n".b + __rbscope_a)
rescue Exception
end`, answer, path)
}

// parseAnswer reads the wrapper's answer file.
func parseAnswer(b []byte) (*Result, error) {
	kind, rest, _ := bytes.Cut(b, []byte("\n"))
	switch string(kind) {
	case "ok":
		return &Result{Value: string(rest)}, nil
	case "error":
		class, rest, _ := bytes.Cut(rest, []byte("\n"))
		n, rest, _ := bytes.Cut(rest, []byte("\n"))
		size, err := strconv.Atoi(string(n))
		if err != nil || size > len(rest) {
			return nil, fmt.Errorf("malformed answer from the process")
		}
		e := &RubyError{Class: string(class), Message: string(rest[:size])}
		if bt := string(rest[size:]); bt != "" {
			e.Backtrace = strings.Split(bt, "\n")
		}
		return &Result{Raised: e}, nil
	}
	return nil, fmt.Errorf("malformed answer from the process")
}
