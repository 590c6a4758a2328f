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
// to a pipe rbscope made inside the process and reads the other end of.
//
// A process whose Ruby threads all sleep checks interrupts only when woken:
// rbscope then sends it SIGCHLD, which Ruby handles itself by waking the
// main thread. Ruby treats that wake as spurious: the job only starts a
// thread and returns, so the sleep, Mutex#sleep, Queue#pop or IO.select the
// main thread was in goes on. A program that traps CHLD itself (a
// preforking master reaping its workers) would run its handler, so it is
// never woken: the code then waits for the program's next safe point.
package rubyexec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
)

// Errors callers tell apart.
var (
	// ErrJobsUnsafe means the Ruby queues a postponed job where it may
	// never run, or on freed memory (2.7; see layout.JobsOnStaleEC).
	ErrJobsUnsafe = errors.New("this Ruby (before 3.0) queues a postponed job on the execution context of whichever thread last held the GVL, which may have ended: the job would never run, or touch freed memory; exec and alloc need Ruby 3.0 or newer")
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

// ErrEmulated refuses to run code in a process that runs another
// architecture's code under an emulator (qemu-user): rbscope would borrow
// the emulator's threads, run system calls in the emulator and call the
// Ruby's functions as this machine's code.
var ErrEmulated = errors.New("the process runs another architecture's code under an emulator; rbscope runs code only in processes of its own architecture")

// Runnable says whether rbscope can run code in the process whose VM is
// vm: its Ruby is code of the machine rbscope runs on.
func Runnable(vm *rubyvm.VM) error {
	if host := arch.Host(); vm.Image.File.Machine != host.Machine {
		return fmt.Errorf("%w (its Ruby is %s code, rbscope runs on %s)", ErrEmulated, arch.MachineName(vm.Image.File.Machine), host.Name)
	}
	return nil
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
	if err := Runnable(vm); err != nil {
		return nil, err
	}
	start := time.Now()
	register, evalString, err := jobFunctions(t, vm, "rb_eval_string")
	if err != nil {
		return nil, err
	}
	ex, err := NewExchange(t)
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	ex.NoWake = trapsCHLD(vm)
	prog := wrapper(ex, code, opt.Name, opt.Raw)
	page, err := postRetrying(t, register, evalString, prog, 0, start, opt.Timeout, !ex.NoWake)
	if err != nil {
		ex.Discard()
		return nil, err
	}
	res, err := ex.Await(start, opt.Timeout, opt.Cancel)
	if err != nil {
		if errors.Is(err, ErrCanceled) {
			err = fmt.Errorf("pid %d: %w before the code finished; the request was emptied if it had not started", t.PID(), ErrCanceled)
		}
		if errors.Is(err, ErrNoSafePoint) && running(t, vm, opt.Name) {
			err = fmt.Errorf("pid %d: %w within %v; it keeps running in the process, and its answer is dropped", t.PID(), ErrStillRunning, opt.Timeout)
		}
		// The job may still run later. The page it reads stays mapped, and
		// now holds a program that does nothing: Ruby stops reading source
		// at a NUL byte, so even a copy torn by this write runs either the
		// old program (whose answer goes nowhere: rbscope's end of the pipe
		// is closed) or nil. The write end stays open in the process: the
		// program may have started and hold it.
		if !errors.Is(err, target.ErrExited) {
			_ = t.WhilePaused([]int{t.PID()}, func(s *target.Stopped) error {
				_, err := s.WriteAt([]byte("nil\x00"), page.addr)
				return err
			})
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
	ex.NoWake = trapsCHLD(vm)
	if _, err := postRetrying(t, register, inspect, "", obj, start, timeout, !ex.NoWake); err != nil {
		return nil, err
	}
	res, err := ex.Await(start, timeout, nil)
	if err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// jobFunctions returns the addresses of rb_postponed_job_register_one and
// of job, the function it is to queue.
func jobFunctions(t *target.Live, vm *rubyvm.VM, job string) (register, fn uint64, err error) {
	if vm.Layout.JobsOnStaleEC == 1 {
		return 0, 0, fmt.Errorf("pid %d: cannot run code in Ruby %s: %w", t.PID(), vm.Version, ErrJobsUnsafe)
	}
	for _, s := range []struct {
		name string
		addr *uint64
	}{{"rb_postponed_job_register_one", &register}, {job, &fn}} {
		if *s.addr, _, err = vm.Symbol(s.name); err != nil {
			return 0, 0, fmt.Errorf("pid %d: cannot run code: %w", t.PID(), err)
		}
	}
	return register, fn, nil
}

// postRetrying posts a job (see post), retrying while Ruby 3.1 refuses it
// because an earlier one for the same function is still queued.
func postRetrying(t *target.Live, register, fn uint64, prog string, data uint64, start time.Time, timeout time.Duration, wake bool) (mapping, error) {
	m, err := post(t, register, fn, prog, data)
	for (errors.Is(err, errQueued) || errors.Is(err, target.ErrSegvBlocked)) && time.Since(start) < timeout {
		// An earlier request that timed out still waits for a safe point
		// (wake the process, then queue ours once that one has run and done
		// nothing), or the main thread runs a signal handler right now.
		if errors.Is(err, errQueued) && wake {
			_ = t.Wake(unix.SIGCHLD)
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

// running reports whether a thread of vm, t's Ruby, runs the code now: a
// frame of it (its file is name) is on a Ruby stack, read without a pause.
func running(t *target.Live, vm *rubyvm.VM, name string) bool {
	vm.ForgetCaches()
	read, err := stacks.NewReader(t, vm, stacks.ReaderOptions{}).Read(&stacks.Selection{Nonblocking: true})
	if err != nil {
		return false
	}
	for _, th := range read.Threads {
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
	var m mapping
	err := t.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		unmapNow := func() {
			if m.size > 0 {
				s.Syscall(pid, unix.SYS_MUNMAP, m.addr, m.size)
				m = mapping{}
			}
		}
		if prog != "" {
			size := uint64(len(prog)+1+4095) &^ 4095
			ret, err := s.Syscall(pid, unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
			if err != nil {
				return fmt.Errorf("pid %d: map a request page: %w", pid, err)
			}
			if ret < 0 && ret > -4096 {
				return fmt.Errorf("pid %d: map a request page: %w", pid, unix.Errno(-ret))
			}
			m = mapping{uint64(ret), size}
			if _, err := s.WriteAt(append([]byte(prog), 0), m.addr); err != nil {
				unmapNow()
				return fmt.Errorf("pid %d: write the request: %w", pid, err)
			}
			data = m.addr
		}
		r, err := s.Call(pid, register, 0, fn, data)
		if err != nil {
			unmapNow()
			return fmt.Errorf("pid %d: register the job: %w", pid, err)
		}
		switch uint32(r) {
		case 1:
			return nil
		case 2:
			// Ruby 3.1 keeps one job per function: an earlier request of
			// rbscope (one that timed out) is still queued, and would run
			// instead.
			unmapNow()
			return errQueued
		default:
			unmapNow()
			return fmt.Errorf("pid %d: the VM's postponed-job table is full; try again later", pid)
		}
	})
	if err != nil {
		return mapping{}, err
	}
	return m, nil
}

// unmap removes the request page once the job has run.
func unmap(t *target.Live, m mapping) error {
	pid := t.PID()
	return t.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		ret, err := s.Syscall(pid, unix.SYS_MUNMAP, m.addr, m.size)
		if err == nil && ret != 0 {
			err = unix.Errno(-ret)
		}
		return err
	})
}

// Exchange is the pipe a job answers through. rbscope makes it inside the
// process with an injected pipe2 system call, takes the read end with
// pidfd_getfd and closes it in the process, where only the write end
// remains, close-on-exec. No file is involved: nothing the process's user
// can rename, replace by a symbolic link or a FIFO. The program that
// answers closes the write end.
type Exchange struct {
	t *target.Live
	// r is rbscope's read end (non-blocking), w the write end's number in
	// the process, and pipe the pipe's identity (device and inode): by the
	// time rbscope closes w in the process, the program may have closed
	// it and reused the number for another file.
	r, w int
	pipe [2]uint64
	buf  []byte
	// NoWake keeps Await from waking the main thread with SIGCHLD (the
	// program traps CHLD: see trapsCHLD).
	NoWake bool
}

// trapsCHLD tells whether the program has its own CHLD trap, which a
// SIGCHLD from rbscope would run; when that cannot be told, it has none.
func trapsCHLD(vm *rubyvm.VM) bool {
	trapped, ok := vm.TrapsSignal(int(unix.SIGCHLD))
	return trapped && ok
}

// MaxAnswer bounds the answer rbscope reads from a process.
const MaxAnswer = 256 << 20

// NewExchange makes an answer pipe in the process of t, borrowing its main
// thread for a few system calls.
func NewExchange(t *target.Live) (*Exchange, error) {
	pid := t.PID()
	var d *Exchange
	err := t.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		// The kernel writes the two descriptors to memory: a scratch page.
		page, err := s.Syscall(pid, unix.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
		if err == nil && page < 0 && page > -4096 {
			err = unix.Errno(-page)
		}
		if err != nil {
			return fmt.Errorf("pid %d: map a scratch page: %w", pid, err)
		}
		defer s.Syscall(pid, unix.SYS_MUNMAP, uint64(page), 4096)
		ret, err := s.Syscall(pid, unix.SYS_PIPE2, uint64(page), unix.O_CLOEXEC)
		if err == nil && ret != 0 {
			err = unix.Errno(-ret)
		}
		if err != nil {
			return fmt.Errorf("pid %d: make an answer pipe: %w", pid, err)
		}
		closeInProcess := func(fds ...int) {
			for _, fd := range fds {
				s.Syscall(pid, unix.SYS_CLOSE, uint64(fd))
			}
		}
		var fds [8]byte
		if err := target.ReadFull(s, fds[:], uint64(page)); err != nil {
			return fmt.Errorf("pid %d: read the answer pipe's descriptors: %w", pid, err)
		}
		pr, pw := int(int32(binary.LittleEndian.Uint32(fds[:4]))), int(int32(binary.LittleEndian.Uint32(fds[4:])))
		r, pipe, err := takePipe(t, pr, pw)
		if err != nil {
			closeInProcess(pr, pw)
			return err
		}
		closeInProcess(pr)
		d = &Exchange{t: t, r: r, w: pw, pipe: pipe}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// takePipe takes the read end pr of the pipe the process just made, and
// checks that pr and pw are the two ends of one pipe (another thread of
// the process could have put other files under those numbers meanwhile).
func takePipe(t *target.Live, pr, pw int) (int, [2]uint64, error) {
	r, err := t.GetFD(pr)
	if err != nil {
		return -1, [2]uint64{}, err
	}
	w, err := t.GetFD(pw)
	if err != nil {
		unix.Close(r)
		return -1, [2]uint64{}, err
	}
	defer unix.Close(w)
	var sr, sw unix.Stat_t
	err = errors.Join(unix.Fstat(r, &sr), unix.Fstat(w, &sw))
	if err == nil && (sr.Mode&unix.S_IFMT != unix.S_IFIFO || sw.Mode&unix.S_IFMT != unix.S_IFIFO || sr.Ino != sw.Ino || sr.Dev != sw.Dev) {
		err = errors.New("its descriptors are not the pipe it made")
	}
	if err == nil {
		err = unix.SetNonblock(r, true)
	}
	if err != nil {
		unix.Close(r)
		return -1, [2]uint64{}, fmt.Errorf("pid %d: answer pipe: %w", t.PID(), err)
	}
	return r, [2]uint64{uint64(sr.Dev), sr.Ino}, nil
}

// FD is the number of the pipe's write end in the process.
func (d *Exchange) FD() int { return d.w }

// Close closes rbscope's end: a job that answers later gets EPIPE, which
// its program swallows.
func (d *Exchange) Close() error {
	if d.r < 0 {
		return nil
	}
	err := unix.Close(d.r)
	d.r = -1
	return err
}

// Discard closes the write end in the process too, for a job that was
// never queued (so no program will use it), and then rbscope's end. The
// number is closed only while it still names the pipe rbscope made.
func (d *Exchange) Discard() {
	pid := d.t.PID()
	_ = d.t.WhilePaused([]int{pid}, func(s *target.Stopped) error {
		if !d.stillOurs() {
			return nil
		}
		_, err := s.Syscall(pid, unix.SYS_CLOSE, uint64(d.w))
		return err
	})
	d.Close()
}

// stillOurs tells whether the write end's number in the process still
// names the pipe rbscope made.
func (d *Exchange) stillOurs() bool {
	fd, err := d.t.GetFD(d.w)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && [2]uint64{uint64(st.Dev), st.Ino} == d.pipe
}

// wakeAfter is how long rbscope waits for the job to start before waking
// the main thread with SIGCHLD, and wakeEvery how often it repeats that.
const (
	wakeAfter = 20 * time.Millisecond
	wakeEvery = time.Second
)

// Await waits for the job's answer until timeout has passed since start
// or cancel is closed, waking the main thread while the answer is missing.
// It reads at most MaxAnswer bytes, and never blocks for longer than a few
// milliseconds at a time.
func (d *Exchange) Await(start time.Time, timeout time.Duration, cancel <-chan struct{}) (*Result, error) {
	pid := d.t.PID()
	nextWake := start.Add(wakeAfter)
	chunk := make([]byte, 64<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(d.r), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 5); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("pid %d: wait for the answer: %w", pid, err)
		}
		eof := false
		for fds[0].Revents != 0 {
			n, err := unix.Read(d.r, chunk)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("pid %d: read the answer: %w", pid, err)
			}
			if n == 0 {
				eof = true
				break
			}
			d.buf = append(d.buf, chunk[:n]...)
			body, done, err := complete(d.buf)
			if err != nil {
				return nil, fmt.Errorf("pid %d: %w", pid, err)
			}
			if done {
				return parseAnswer(body)
			}
		}
		if procfs.Exited(pid) {
			return nil, fmt.Errorf("pid %d exited before the code finished: %w", pid, target.ErrExited)
		}
		if eof {
			return nil, fmt.Errorf("pid %d: the process closed the answer pipe without a whole answer (%d bytes)", pid, len(d.buf))
		}
		now := time.Now()
		if now.Sub(start) > timeout {
			why := "a thread may be stuck in C code holding the GVL, or in a long GC"
			if d.NoWake {
				why = "the program traps SIGCHLD, so rbscope did not wake its sleeping threads with one"
			}
			return nil, fmt.Errorf("pid %d: %w within %v (%s); nothing was run, and the queued request was emptied", pid, ErrNoSafePoint, timeout, why)
		}
		if now.After(nextWake) && !d.NoWake {
			if err := d.t.Wake(unix.SIGCHLD); err != nil {
				return nil, err
			}
			nextWake = now.Add(wakeEvery)
		}
		select {
		case <-cancel:
			return nil, ErrCanceled
		default:
		}
	}
}

// complete returns the answer behind its length header once all of it has
// been read, and an error for a header that is malformed or announces
// more than MaxAnswer bytes.
func complete(b []byte) (body []byte, done bool, err error) {
	n, body, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		if len(b) > 20 {
			return nil, false, errors.New("malformed answer from the process")
		}
		return nil, false, nil
	}
	size, perr := strconv.ParseUint(string(n), 10, 64)
	if perr != nil {
		return nil, false, fmt.Errorf("malformed answer from the process: %w", perr)
	}
	if size > MaxAnswer {
		return nil, false, fmt.Errorf("the process announced an answer of %d bytes, more than the %d rbscope reads", size, MaxAnswer)
	}
	if uint64(len(body)) > size {
		return nil, false, errors.New("malformed answer from the process: more bytes than announced")
	}
	if uint64(len(body)) < size {
		return nil, false, nil
	}
	return body, true, nil
}

// wrapper is the Ruby program the job evaluates. The job runs in "trap
// context", as a Signal.trap handler does, where Mutex#lock (and so
// require, Logger, Monitor) raises ThreadError; so the wrapper starts a
// thread, "rbscope-exec", which runs the user's code in a fresh binding
// under the top level and writes the answer. The job does not wait for
// that thread: joining it from the interrupted thread leaves that thread's
// status "runnable", and a Kernel#sleep or Mutex#sleep it was interrupted
// in then returns as if woken (the program printed "woke" after `sleep`).
// Returning at once leaves the interrupted wait as it was. The code travels
// base64-encoded, so no quoting issue can break the wrapper, and the
// wrapper's own names start with __rbscope so the code cannot clash with
// them. Every constant it names is written from the top (::Thread): Ruby
// resolves the job's constants in the lexical scope of the frame it
// interrupted, whose module may have an Encoding or a Thread of its own.
func wrapper(answer *Exchange, code, name string, raw bool) string {
	enc := base64.StdEncoding.EncodeToString([]byte(code))
	show := "inspect"
	if raw {
		show = "to_s"
	}
	run := writeAnswer(answer, answerExpr(fmt.Sprintf(`__rbscope_v = ::TOPLEVEL_BINDING.eval("->{ binding }").call.eval(%q.unpack1("m0").force_encoding(::Encoding::UTF_8), %q, 1)
    begin; __rbscope_v.%s.to_s; rescue ::Exception => __rbscope_ie; "#<%s raised #{__rbscope_ie.class}>"; end`, enc, name, show, show)))
	return fmt.Sprintf(`->{
  begin
    ::Thread.new do
      ::Thread.current.name = "rbscope-exec"
      ::Thread.current.report_on_exception = false
      %s
    end
  rescue ::Exception => __rbscope_te
    %s
  end
}.call
nil
`, run, writeAnswer(answer, answerExpr("raise __rbscope_te")))
}

// AnswerProgram returns Ruby code that evaluates body, an expression whose
// value's to_s is the answer, and writes that answer (or the exception body
// raised) to ex's pipe, the way Await reads it, and closes the pipe. It
// never raises: a failure to write (rbscope gone) is swallowed too.
func AnswerProgram(ex *Exchange, body string) string {
	return writeAnswer(ex, answerExpr(body))
}

// answerExpr is a Ruby expression: "ok\n" and body's value, or "error\n",
// the class, the message's size and the message and backtrace of what it
// raised.
func answerExpr(body string) string {
	return fmt.Sprintf(`begin
    __rbscope_r = (%s).to_s
    "ok\n".b + __rbscope_r.b
  rescue ::Exception => __rbscope_e
    __rbscope_m = (__rbscope_e.message.to_s rescue "").b
    "error\n#{__rbscope_e.class.name.to_s.b}\n#{__rbscope_m.bytesize}\n".b + __rbscope_m + ::Kernel.Array(__rbscope_e.backtrace).join("\n").b
  end`, body)
}

// writeAnswer writes answer (a Ruby expression) behind a length header to
// the pipe's write end, and closes it. The write end is blocking, but
// Ruby may have made it non-blocking: then it waits for room. A write
// fails with EPIPE once rbscope has closed its end (gone, or timed out).
// Nothing is written, nor closed, unless the descriptor still is rbscope's
// pipe (see Owns): the program may have closed the number and opened
// another file under it (a socket, a log) since rbscope made the pipe.
func writeAnswer(ex *Exchange, answer string) string {
	return fmt.Sprintf(`begin
  __rbscope_a = %s
  __rbscope_d = "#{__rbscope_a.bytesize}\n".b + __rbscope_a
  __rbscope_w = ::IO.for_fd(%d, autoclose: false)
  if %s
    __rbscope_w.autoclose = true
    begin
      until __rbscope_d.empty?
        begin
          __rbscope_d = __rbscope_d.byteslice(__rbscope_w.syswrite(__rbscope_d), __rbscope_d.bytesize)
        rescue ::Errno::EAGAIN, ::Errno::EWOULDBLOCK, ::Errno::EINTR
          ::IO.select(nil, [__rbscope_w], nil, 1)
        end
      end
    ensure
      __rbscope_w.close
    end
  end
rescue ::Exception
end`, answer, ex.w, ex.Owns("__rbscope_w"))
}

// Owns returns a Ruby expression telling whether io, an IO on the write
// end's number, still is the pipe rbscope made (its device and inode).
func (d *Exchange) Owns(io string) string {
	return fmt.Sprintf(`(__rbscope_st = %s.stat; __rbscope_st.pipe? && __rbscope_st.dev == %d && __rbscope_st.ino == %d)`, io, d.pipe[0], d.pipe[1])
}

// CloseProgram returns a Ruby statement that closes the write end in the
// process if its number still is rbscope's pipe, and never raises.
func (d *Exchange) CloseProgram() string {
	return fmt.Sprintf(`begin; __rbscope_c = ::IO.for_fd(%d, autoclose: false); if %s then __rbscope_c.autoclose = true; __rbscope_c.close end; rescue ::Exception; end`, d.w, d.Owns("__rbscope_c"))
}

// parseAnswer reads the wrapper's answer.
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
