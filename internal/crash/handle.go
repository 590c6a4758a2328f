package crash

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/liveproc"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
	"github.com/rbscope/rbscope/internal/wire"
)

// Args are what the kernel passes through core_pattern's specifiers.
type Args struct {
	PID    int       // %P: PID in the initial namespace
	TID    int       // %i: the thread that crashed
	Signal int       // %s
	Time   time.Time // %t
	// Kernel says that the kernel passed the next four (an older
	// install's pattern did not): CoreLimit (%c, the process's
	// RLIMIT_CORE; -1 for unlimited), Dumpable (%d, its dumpable mode),
	// and UID and GID (%u, %g, its real IDs in the initial namespace).
	Kernel    bool
	CoreLimit int64
	Dumpable  int
	UID, GID  int64
}

// uid is the crashed process's real uid: the kernel's %u, else its status
// file's; -1 when neither is known.
func (a Args) uid() int64 {
	if a.Kernel {
		return a.UID
	}
	// The real uid, as the kernel's %u gives it: the first of the status
	// file's Uid fields (/proc/PID's owner is the effective uid, and root
	// for a process that is not dumpable).
	st, err := procfs.ReadStatus(a.PID, 0)
	if err != nil || st.UIDs[0] > 1<<32 {
		return -1
	}
	return int64(st.UIDs[0])
}

// reportFrameBudget bounds the Ruby frames one report reads, over all
// threads (a hostile process can hold many threads of deep stacks).
const reportFrameBudget = 200000

// reportFrameBytes bounds what the Ruby frames of one report may hold,
// and again what its native frames may
// (labels and paths): a hostile process can give every one of
// reportFrameBudget frames a path of the longest string rbscope reads.
const reportFrameBytes = 32 << 20

// frameCost is what a frame is charged against reportFrameBytes: its
// strings, plus what the report's JSON spends around them.
func frameCost(f stacks.Frame) int { return len(f.Label) + len(f.BaseLabel) + len(f.Path) + 64 }

// nativeFrameCost is what a native frame is charged against
// reportFrameBytes: its names, plus what the report's JSON spends around
// them (its addresses and keys).
func nativeFrameCost(f unwind.Frame) int { return len(f.Function) + len(f.Object) + len(f.File) + 128 }

// keepFrameBytes cuts the Ruby stacks of a report to budget bytes (see
// frameCost), spending it on the crashing thread first, then on the others
// in order, and returns how many frames it left out.
func keepFrameBytes(threads []stacks.Thread, crashed, budget int) (cut int) {
	order := make([]int, 0, len(threads))
	for i, th := range threads {
		if th.TID == crashed {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	for _, i := range order {
		frames := threads[i].Frames
		for j, f := range frames {
			if budget -= frameCost(f); budget < 0 {
				cut += len(frames) - j
				threads[i].Frames = frames[:j:j]
				break
			}
		}
	}
	return cut
}

// notesPrefix is how much of the core's start is kept for its notes
// (registers of every thread, the file table).
const notesPrefix = 16 << 20

// Handle keeps a report of one crash. core is the kernel's pipe. It never
// executes anything from the crashed process's filesystem.
func Handle(cfg *Config, a Args, core io.Reader) (*crashreport.Report, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := checkStore(cfg.Dir); err != nil {
		io.Copy(io.Discard, core) // never leave the kernel blocked
		return nil, err
	}
	uid := a.uid()
	rotate(cfg.Dir, cfg.MaxCrashes-1, uid)
	dir, id, err := newCrashDir(cfg.Dir, a)
	if err != nil {
		io.Copy(io.Discard, core)
		return nil, err
	}
	r := &crashreport.Report{ID: id, Time: a.Time, PID: a.PID, TID: a.TID, UID: uid, Signal: a.Signal, SignalName: SignalName(a.Signal)}

	// The core streams to disk (and to a previous handler) while /proc is
	// read: the kernel keeps the process and its memory until we exit.
	type streamed struct {
		info crashreport.Core
		err  error
	}
	streamDone := make(chan streamed, 1)
	var notes noteCatcher
	go func() {
		defer func() {
			if p := recover(); p != nil { // a bug must not cost the report
				streamDone <- streamed{err: fmt.Errorf("rbscope's internal error: %v", p)}
			}
		}()
		info, err := stream(ctx, cfg, dir, a, core, &notes)
		streamDone <- streamed{info, err}
	}()

	// Every read of the dying process runs under a deadline that leaves
	// time for the report and the notifications: a process can make its
	// /proc files and memory slow or blocking to read.
	readCtx, cancelReads := context.WithTimeout(ctx, readBudget(cfg.Timeout))
	defer cancelReads()
	var exe string
	var cmdline []string
	if within(readCtx, "exe and cmdline", &r.Problems, func() {
		exe = procfs.Exe(a.PID)
		if args := procfs.Args(procfs.Root, a.PID); args != nil {
			cmdline = redactArgs(args)
		}
	}) {
		r.Exe, r.Cmdline = exe, cmdline
	}
	var snap crashreport.Proc
	var snapProblems []string
	if within(readCtx, "/proc", &r.Problems, func() { snap = snapshot(a.PID, &snapProblems) }) {
		r.Proc = snap
		r.Problems = append(r.Problems, snapProblems...)
	}
	var ruby *crashreport.Ruby
	var rubyProblems []string
	if within(readCtx, "ruby", &r.Problems, func() { ruby, rubyProblems = readRubyState(a.PID) }) {
		r.Ruby = ruby
		r.Problems = append(r.Problems, rubyProblems...)
		if ruby != nil {
			if cut := keepFrameBytes(ruby.Threads, a.TID, reportFrameBytes); cut > 0 {
				r.Problems = append(r.Problems, fmt.Sprintf("ruby threads: %d frames not kept: their labels and paths would pass the report's %d MiB", cut, reportFrameBytes>>20))
			}
		}
	}

	var s streamed
	var finished bool
	select {
	case s, finished = <-streamDone:
	case <-readCtx.Done():
		select { // both ready: the stream did finish
		case s, finished = <-streamDone:
		default:
		}
	}
	if finished {
		r.Core = s.info
		if s.err != nil {
			r.Problems = append(r.Problems, "core: "+s.err.Error())
		}
	} else {
		// The stream goes on until we exit: what it has stored is cut short.
		r.Core.NotStored = "the handler's time ran out while reading the core (a core.zst left is cut short)"
		r.Problems = append(r.Problems, "core: the handler's time ran out while reading the core")
	}
	var native nativeState
	if within(readCtx, "native stacks", &r.Problems, func() { native = readNative(a.PID, r.TID, r.Signal, &notes) }) {
		r.Registers, r.Native, r.Fault = native.registers, native.threads, native.fault
		r.Problems = append(r.Problems, native.problems...)
	}
	r.HandledIn = time.Since(start).Round(time.Millisecond)
	// A report that cannot be written (a full disk) is still sent.
	werr := write(r, dir)
	if n := notify(ctx, r, cfg); n > 0 && werr == nil {
		werr = write(r, dir) // again, with the outcome of the notifications
	}
	if werr != nil {
		return r, fmt.Errorf("writing the report: %w", werr)
	}
	return r, nil
}

// readBudget is how much of the handler's timeout its reads of the dying
// process may take: the rest is kept for writing and sending the report.
func readBudget(timeout time.Duration) time.Duration {
	return timeout - min(timeout/3, 15*time.Second)
}

// within runs f and waits for it until ctx ends. It reports whether f
// finished; if not, it says in problems that what's time ran out (or that
// f panicked: a bug in one part must not cost the rest of the report), and
// f goes on alone: it must write only variables nobody reads after this.
func within(ctx context.Context, what string, problems *[]string, f func()) bool {
	if ctx.Err() != nil {
		*problems = append(*problems, what+": not read, the handler's time ran out")
		return false
	}
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	select {
	case p := <-done:
		if p != nil {
			*problems = append(*problems, fmt.Sprintf("%s: not read, rbscope's internal error: %v", what, p))
			return false
		}
		return true
	case <-ctx.Done():
		*problems = append(*problems, what+": the handler's time ran out while reading it")
		return false
	}
}

func newCrashDir(store string, a Args) (string, string, error) {
	base := fmt.Sprintf("%s-%d", a.Time.UTC().Format("20060102T150405Z"), a.PID)
	for i := 0; i < 100; i++ {
		id := base
		if i > 0 {
			id = fmt.Sprintf("%s-%d", base, i)
		}
		dir := filepath.Join(store, id)
		if err := os.Mkdir(dir, 0o700); err == nil {
			return dir, id, nil
		} else if !errors.Is(err, os.ErrExist) {
			return "", "", err
		}
	}
	return "", "", fmt.Errorf("too many crashes named %s", base)
}

// noteCatcher keeps, from the core streaming past, its ELF and program
// headers and the bytes of its PT_NOTE segments (registers of every
// thread, the file table), wherever in the file they are: the kernel writes
// notes first, gdb's gcore after the memory.
type noteCatcher struct {
	mu    sync.Mutex // Write runs on the streaming goroutine, threads after it or at the timeout
	head  []byte     // the first headerBytes bytes
	pos   int64
	notes []noteRange
	total int
	ready bool
}

type noteRange struct {
	off, end int64
	data     []byte
}

const headerBytes = 64 << 10

func (c *noteCatcher) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(b)
	if len(c.head) < headerBytes {
		take := min(headerBytes-len(c.head), len(b))
		c.head = append(c.head, b[:take]...)
	}
	if !c.ready && len(c.head) >= 64 {
		c.ready = c.findNotes()
	}
	for i := range c.notes {
		r := &c.notes[i]
		lo, hi := max(r.off, c.pos), min(r.end, c.pos+int64(n))
		if lo < hi && c.total+int(hi-lo) <= notesPrefix {
			r.data = append(r.data, b[lo-c.pos:hi-c.pos]...)
			c.total += int(hi - lo)
		}
	}
	c.pos += int64(n)
	return n, nil
}

// headers parses the ELF and program headers in the head.
func (c *noteCatcher) headers() (*elf.File, error) {
	return target.ReadELFHeaders(bytes.NewReader(c.head))
}

// findNotes reads the program headers once enough of the file is in.
func (c *noteCatcher) findNotes() bool {
	ef, err := c.headers()
	if err != nil {
		return len(c.head) >= headerBytes // give up once the headers should be in
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_NOTE {
			c.notes = append(c.notes, noteRange{off: int64(p.Off), end: int64(p.Off + p.Filesz)})
		}
	}
	// Bytes of earlier writes (before c.pos): take them from the head.
	// The current write's are Write's to take, after this.
	for i := range c.notes {
		r := &c.notes[i]
		if seen := min(c.pos, int64(len(c.head))); r.off < seen {
			r.data = append(r.data, c.head[r.off:min(r.end, seen)]...)
		}
	}
	return true
}

// stream reads the whole core: into core.zst up to the size cap and while
// the disk keeps its reserve, into the previous handler if there was one,
// and its notes into notes. It says what became of the core.
func stream(ctx context.Context, cfg *Config, dir string, a Args, core io.Reader, notes *noteCatcher) (crashreport.Core, error) {
	var info crashreport.Core
	writers := []io.Writer{notes}
	var zw *zstd.Encoder
	var zf *os.File
	var stored *limitedWriter
	var local *tolerantWriter // a failing disk must not cut the chained handler's core short
	var fs unix.Statfs_t
	limit := cfg.MaxCoreBytes
	if a.Kernel && a.CoreLimit > 0 && a.CoreLimit < limit {
		limit = a.CoreLimit // the process's own RLIMIT_CORE
	}
	if a.Kernel && a.CoreLimit == 0 {
		info.NotStored = "the process's core size limit (RLIMIT_CORE) is 0"
	} else if err := unix.Statfs(dir, &fs); err == nil && int64(fs.Bavail)*int64(fs.Bsize) < cfg.KeepFreeBytes {
		info.NotStored = fmt.Sprintf("less than %d bytes free on the store's disk", cfg.KeepFreeBytes)
	} else {
		f, err := os.OpenFile(filepath.Join(dir, "core.zst"), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			info.NotStored = err.Error()
		} else {
			zf = f
			zw, _ = zstd.NewWriter(&reserveWriter{w: f, dir: dir, keep: cfg.KeepFreeBytes}, zstd.WithEncoderLevel(zstd.SpeedFastest))
			stored = &limitedWriter{w: zw, left: limit}
			local = &tolerantWriter{w: stored}
			writers = append(writers, local)
		}
	}
	var chain *exec.Cmd
	var chainIn io.WriteCloser
	if strings.HasPrefix(cfg.PreviousPattern, "|") {
		argv := expandPattern(strings.Fields(cfg.PreviousPattern[1:]), a)
		if len(argv) > 0 {
			chain = exec.CommandContext(ctx, argv[0], argv[1:]...)
			chainIn, _ = chain.StdinPipe()
			if err := chain.Start(); err != nil {
				info.ChainError = err.Error()
				chain = nil
			} else {
				info.ChainedTo = strings.Join(argv, " ")
				writers = append(writers, &tolerantWriter{w: chainIn})
			}
		}
	}
	n, err := io.Copy(io.MultiWriter(writers...), core)
	info.Bytes = n
	if chain != nil {
		chainIn.Close()
		if werr := chain.Wait(); werr != nil {
			info.ChainError = werr.Error()
		}
	}
	if zw != nil {
		info.Truncated = stored.dropped > 0
		cerr := zw.Close()
		if local.err != nil {
			cerr = local.err
		}
		if cerr != nil {
			info.Truncated = true
			info.NotStored = fmt.Sprintf("writing core.zst failed (what it holds is cut short): %v", cerr)
		}
		if st, serr := zf.Stat(); serr == nil {
			info.Stored = st.Size()
		}
		zf.Close()
		info.File = "core.zst"
	}
	return info, err
}

// reserveWriter writes the stored core and checks, every reserveCheckEvery
// bytes, that the store's disk keeps keep bytes free: a core that would
// take the disk below its reserve is cut there.
type reserveWriter struct {
	w       io.Writer
	dir     string
	keep    int64
	unknown int64 // bytes written since the last check
}

// reserveCheckEvery is how many stored bytes pass between two checks.
const reserveCheckEvery = 1 << 20

func (r *reserveWriter) Write(b []byte) (int, error) {
	if r.unknown += int64(len(b)); r.unknown >= reserveCheckEvery {
		r.unknown = 0
		var fs unix.Statfs_t
		if err := unix.Statfs(r.dir, &fs); err == nil && int64(fs.Bavail)*int64(fs.Bsize)-int64(len(b)) < r.keep {
			return 0, fmt.Errorf("the store's disk came within %d bytes of full", r.keep)
		}
	}
	return r.w.Write(b)
}

// limitedWriter passes on at most left bytes and counts what it drops.
type limitedWriter struct {
	w       io.Writer
	left    int64
	dropped int64
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	keep := min(int64(len(b)), max(l.left, 0))
	if keep > 0 {
		if _, err := l.w.Write(b[:keep]); err != nil {
			return 0, err
		}
		l.left -= keep
	}
	l.dropped += int64(len(b)) - keep
	return len(b), nil
}

// tolerantWriter stops writing after its first error and keeps accepting
// bytes: a previous handler that quits early must not cost us our own copy,
// and a local write error must not cut the previous handler's core short.
type tolerantWriter struct {
	w   io.Writer
	err error
}

func (t *tolerantWriter) Write(b []byte) (int, error) {
	if t.err == nil {
		_, t.err = t.w.Write(b)
	}
	return len(b), nil
}

// expandPattern expands the core_pattern specifiers a chained handler asks
// for, from what the kernel gave us and /proc.
func expandPattern(argv []string, a Args) []string {
	comm, exe := procfs.Comm(a.PID, 0), procfs.Exe(a.PID)
	host, _ := os.Hostname()
	var uid, gid string
	if u, g, ok := procfs.Owner(a.PID); ok {
		uid, gid = strconv.Itoa(int(u)), strconv.Itoa(int(g))
	}
	// What the kernel passed wins over what /proc says now; an older
	// install's pattern passed no %c and %d: unlimited and dumpable then.
	limit, dumpable := "18446744073709551615", "1"
	if a.Kernel {
		if a.CoreLimit >= 0 {
			limit = strconv.FormatInt(a.CoreLimit, 10)
		}
		dumpable = strconv.Itoa(a.Dumpable)
		uid, gid = strconv.FormatInt(a.UID, 10), strconv.FormatInt(a.GID, 10)
	}
	repl := map[byte]string{
		'p': strconv.Itoa(a.PID), 'P': strconv.Itoa(a.PID), 'i': strconv.Itoa(a.TID), 'I': strconv.Itoa(a.TID),
		's': strconv.Itoa(a.Signal), 't': strconv.FormatInt(a.Time.Unix(), 10), 'e': strings.TrimSpace(comm),
		'E': strings.ReplaceAll(exe, "/", "!"), 'h': host, 'u': uid, 'g': gid, 'c': limit, 'd': dumpable, '%': "%",
	}
	out := make([]string, len(argv))
	for i, arg := range argv {
		var b strings.Builder
		for j := 0; j < len(arg); j++ {
			if arg[j] == '%' && j+1 < len(arg) {
				b.WriteString(repl[arg[j+1]])
				j++
				continue
			}
			b.WriteByte(arg[j])
		}
		out[i] = b.String()
	}
	return out
}

func snapshot(pid int, problems *[]string) crashreport.Proc {
	f, probs := procfs.ReadProcessFiles(pid)
	*problems = append(*problems, probs...)
	s := crashreport.Proc{Maps: f.Maps, Status: f.Status, Limits: f.Limits, Cgroup: f.Cgroup, Cwd: f.Cwd, FDs: f.FDs, Environ: map[string]string{}}
	for _, kv := range f.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			s.Environ[k] = redactEnv(k, v)
		}
	}
	return s
}

// readRubyState is readRuby; tests replace it with a read that blocks.
var readRubyState = readRuby

// readRuby reads the Ruby stacks of the crashed process from its memory,
// which the kernel keeps until the handler exits, and says what it could not.
func readRuby(pid int) (*crashreport.Ruby, []string) {
	p, err := liveproc.Open(pid, liveproc.Options{})
	var vmErr *liveproc.VMError
	switch {
	case errors.Is(err, rubyvm.ErrNotRuby):
		return nil, nil
	case errors.As(err, &vmErr):
		return nil, []string{"ruby: " + err.Error()}
	case err != nil:
		return nil, []string{"memory: " + err.Error()}
	}
	defer p.Close()
	t, vm := p.Live, p.VM
	var problems []string
	for _, s := range vm.Build().Skipped() {
		problems = append(problems, "ruby image: not read: "+s)
	}
	// The process is dumping its core: it cannot be paused, and it
	// stands still.
	threads, err := stacks.Capture(t, vm, stacks.Options{Nonblocking: true, FrameBudget: reportFrameBudget})
	if err != nil {
		problems = append(problems, "ruby threads: "+err.Error())
	}
	ruby := &crashreport.Ruby{Version: vm.Version, Threads: make([]stacks.Thread, 0, len(threads))}
	for _, th := range threads {
		if th.Ruby {
			ruby.Threads = append(ruby.Threads, th)
		}
	}
	return ruby, problems
}

// noteTarget is the crashed process as the handler reads its native
// stacks: its memory through the kernel, which keeps it until the handler
// exits, and its threads' registers from the core's NT_PRSTATUS notes.
type noteTarget struct {
	target.Target
	threads []target.CoreThread
}

// Threads lists the threads the notes hold.
func (n noteTarget) Threads() ([]int, error) {
	tids := make([]int, len(n.threads))
	for i, th := range n.threads {
		tids[i] = th.TID
	}
	return tids, nil
}

// Registers gives a thread's registers from its note.
func (n noteTarget) Registers(tid int) (target.Regs, error) {
	for _, th := range n.threads {
		if th.TID == tid {
			return th.Regs, nil
		}
	}
	return target.Regs{}, fmt.Errorf("tid %d has no note: %w", tid, target.ErrNoRegisters)
}

// nativeState is what readNative found.
type nativeState struct {
	registers *target.Regs // the crashing thread's
	threads   []crashreport.NativeThread
	problems  []string
	fault     string // see Fault
}

// readNative takes every thread's registers from the core's NT_PRSTATUS
// notes and unwinds its stack with the code's CFI, keeping at most
// reportFrameBytes of native frames (the crashing thread's first).
func readNative(pid, crashed, signal int, notes *noteCatcher) nativeState {
	var ns nativeState
	threads, err := notes.threads()
	if err != nil {
		ns.problems = append(ns.problems, "registers: "+err.Error())
		return ns
	}
	captured := map[int]stacks.Thread{}
	if t, err := target.Attach(pid); err == nil {
		defer t.Close()
		ths, err := stacks.Capture(noteTarget{Target: t, threads: threads}, nil, stacks.Options{Native: true})
		if err != nil {
			ns.problems = append(ns.problems, "native stacks: "+err.Error())
		}
		for _, th := range ths {
			captured[th.TID] = th
		}
	}
	// The crashing thread first, for the frame budget; the report lists
	// them by TID.
	sort.Slice(threads, func(i, j int) bool {
		if (threads[i].TID == crashed) != (threads[j].TID == crashed) {
			return threads[i].TID == crashed
		}
		return threads[i].TID < threads[j].TID
	})
	budget, cut := reportFrameBytes, 0
	for _, th := range threads {
		crashing := th.TID == crashed || len(threads) == 1
		if crashing {
			regs := th.Regs
			ns.registers = &regs
		}
		nt := crashreport.NativeThread{TID: th.TID, PC: th.Regs.PC(), SP: th.Regs.SP()}
		if c, ok := captured[th.TID]; ok {
			frames := c.NativeFrames()
			for k, f := range frames {
				if budget -= nativeFrameCost(f); budget < 0 {
					cut += len(frames) - k
					break
				}
				nt.Frames = append(nt.Frames, f)
			}
			nt.Error = c.NativeError
			if crashing {
				ns.fault = Fault(frames, signal)
			}
		}
		ns.threads = append(ns.threads, nt)
	}
	sort.Slice(ns.threads, func(i, j int) bool { return ns.threads[i].TID < ns.threads[j].TID })
	if cut > 0 {
		ns.problems = append(ns.problems, fmt.Sprintf("native threads: %d frames not kept: their names and paths would pass the report's %d MiB", cut, reportFrameBytes>>20))
	}
	return ns
}

// threads decodes the caught notes with the core reader's note parser.
func (c *noteCatcher) threads() ([]target.CoreThread, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ef, err := c.headers()
	if err != nil {
		return nil, fmt.Errorf("the core does not start like an ELF core: %w", err)
	}
	a, err := arch.ForMachine(ef.Machine)
	if ef.Type != elf.ET_CORE || err != nil {
		return nil, fmt.Errorf("not a core rbscope reads (type %v, machine %v)", ef.Type, ef.Machine)
	}
	var all []target.CoreThread
	var firstErr error
	for _, nr := range c.notes {
		ths, err := target.ParseCoreThreads(nr.data, a)
		all = append(all, ths...)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if len(all) == 0 {
		if firstErr == nil {
			firstErr = fmt.Errorf("no NT_PRSTATUS note")
		}
		return nil, fmt.Errorf("%w (core truncated before its notes?)", firstErr)
	}
	return all, nil
}

// SignalName is the name of signal sig ("SIGSEGV"), or "signal N".
func SignalName(sig int) string {
	name := unix.SignalName(syscall.Signal(sig))
	if name == "" {
		return "signal " + strconv.Itoa(sig)
	}
	return name
}

// write saves report.json and report.txt atomically.
func write(r *crashreport.Report, dir string) error {
	b, err := wire.EncodeCrashReport(r)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, "report.json"), b, 0o600); err != nil {
		return err
	}
	var txt bytes.Buffer
	WriteText(&txt, r)
	return writeFileAtomic(filepath.Join(dir, "report.txt"), txt.Bytes(), 0o600)
}
