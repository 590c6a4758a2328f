package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxStatFiles is how many threads' stat files a process may keep open
// between samples; the threads beyond are opened and closed each time.
const maxStatFiles = 1024

// TaskStates reads which threads of a process the kernel reports running,
// again and again (a sampler asks at every tick), so it keeps /proc/PID/task and each thread's
// stat file open and rereads them in place (a procfs file is rendered anew
// at each read from offset 0): one getdents and one pread per thread,
// instead of an open, a read and a close each.
type TaskStates struct {
	pid   int
	dir   int         // /proc/PID/task, or -1 before the first read
	stats map[int]int // tid -> open fd of /proc/PID/task/TID/stat
	// noKeep is set once rbscope ran out of file descriptors: from then on
	// each stat file is opened and closed at each read.
	noKeep bool
	names  []byte // getdents buffer
	line   []byte // stat buffer
	// running and all are what Read returns, kept and cleared at each
	// read so that a read allocates nothing.
	running, all map[int]bool
	// listed says all holds the process's threads as last listed: a
	// read then only rereads their stat lines, and lists the threads
	// again when one of them has gone or the process's count of threads
	// differs.
	listed bool
	// sched is each thread's schedstat file and what it said at the last
	// read (see stillAsleep); cpus the CPU of each thread whose stat line
	// this read took (LastCPU).
	sched map[int]*schedMark
	cpus  map[int]int
	// switches, when set, tells when a thread was last switched
	// (UseSwitches).
	switches SwitchSeq
}

// SwitchSeq returns a number that changes with every context switch of
// thread tid (target.SwitchWatch.Last), or ok false where it cannot tell.
type SwitchSeq func(tid int) (seq uint64, ok bool)

// UseSwitches makes reads take a thread's stat line only when the thread
// has been switched since its last one was taken, as f tells: a thread
// not switched since is where it was (on a CPU, waiting for one, or
// asleep; one woken since but not yet on a CPU counts as asleep, as in
// stillAsleep), and costs no system call.
func (t *TaskStates) UseSwitches(f SwitchSeq) { t.switches = f }

// schedMark is what a thread's schedstat said at the last read: its run
// time and its count of turns on a CPU, and the state its stat line then
// gave.
type schedMark struct {
	fd         int // -1 where the file cannot be read
	ran, turns uint64
	known      bool
	state      byte // the state its last stat line gave
	// seq is the thread's switch sequence (UseSwitches) when its last
	// stat line was taken, if seqKnown.
	seq      uint64
	seqKnown bool
}

// ErrGone is what Read returns once the process has exited: its task
// directory is gone, or every thread of it is a zombie.
var ErrGone = errors.New("the process has exited")

// NewTaskStates reads the thread states of process pid; Close releases it.
func NewTaskStates(pid int) *TaskStates {
	return &TaskStates{pid: pid, dir: -1, stats: map[int]int{}, names: make([]byte, 8192), line: make([]byte, 1024),
		running: map[int]bool{}, all: map[int]bool{}, sched: map[int]*schedMark{}, cpus: map[int]int{}}
}

// Read returns the TIDs in state R (running or waiting for a CPU) and all
// TIDs of the process. The maps are the reader's own, valid until the next
// Read; a read allocates nothing once the stat files are open. A process
// that has exited is ErrGone: no exit check is needed beside it.
func (t *TaskStates) Read() (running, all map[int]bool, err error) {
	if t.dir < 0 {
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/task", t.pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, nil, fmt.Errorf("list threads of pid %d: %w", t.pid, ErrGone)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list threads of pid %d: %w", t.pid, err)
		}
		t.dir = fd
	}
	all, running = t.all, t.running
	if t.listed {
		if ok, gone := t.reread(); gone {
			return nil, nil, fmt.Errorf("pid %d: %w", t.pid, ErrGone)
		} else if ok {
			return running, all, nil
		}
	}
	t.listed = false
	clear(t.cpus)
	if _, err := unix.Seek(t.dir, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("list threads of pid %d: %w", t.pid, err)
	}
	clear(all)
	clear(running)
	for {
		n, err := unix.ReadDirent(t.dir, t.names)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, nil, fmt.Errorf("list threads of pid %d: %w", t.pid, ErrGone)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list threads of pid %d: %w", t.pid, err)
		}
		if n == 0 {
			break
		}
		direntTIDs(t.names[:n], all)
		if n < len(t.names)-512 {
			break // all the entries fitted: no need to ask for more
		}
	}
	for tid, fd := range t.stats {
		if !all[tid] {
			unix.Close(fd)
			delete(t.stats, tid)
		}
	}
	for tid, m := range t.sched {
		if !all[tid] {
			m.close()
			delete(t.sched, tid)
		}
	}
	zombies := 0
	for tid := range all {
		st, ok := t.state(tid)
		if !ok {
			// A kept file of an earlier thread with this TID fails; the
			// second try opens the new thread's.
			st, ok = t.state(tid)
		}
		switch {
		case !ok || st.State == 'Z' || st.State == 'X':
			zombies++
		case st.State == 'R':
			running[tid] = true
		}
		if ok {
			t.cpus[tid] = st.Processor
		}
		if m := t.sched[tid]; m != nil {
			m.known, m.seqKnown = false, false // the next read takes its stat line again
		}
	}
	if zombies == len(all) {
		return nil, nil, fmt.Errorf("pid %d: %w", t.pid, ErrGone)
	}
	t.listed = !t.noKeep && len(t.stats) == len(all)
	return running, all, nil
}

// reread reads again the stat lines of the threads last listed, through
// their kept files. ok is false when the list must be made again: a
// thread has gone, or the process counts other threads than the list
// holds. gone is set when every thread is a zombie.
//
// A stat line costs the kernel about 15µs to write, a schedstat line
// under 3µs: a thread that sleeps (stillAsleep) costs the latter only.
// The count of threads is the task directory's link count.
func (t *TaskStates) reread() (ok, gone bool) {
	// The task directory's link count is the count of threads plus two.
	var dir unix.Stat_t
	if err := fstatRaw(t.dir, &dir); err != nil || int(dir.Nlink)-2 != len(t.all) {
		return false, false
	}
	clear(t.running)
	zombies := 0
	for tid := range t.all {
		fd, kept := t.stats[tid]
		if !kept {
			return false, false
		}
		m := t.mark(tid)
		switch seq, ok := t.switchSeq(tid, m); {
		case ok && m.seqKnown && seq == m.seq && m.state != 'Z' && m.state != 'X':
			// Not switched since its last stat line: as it was then. (A
			// zombie is read again: its end is no switch.)
			if m.state == 'R' {
				t.running[tid] = true
			}
			continue
		case ok:
			m.seq, m.seqKnown = seq, true // taken before the stat line
		case t.stillAsleep(m):
			delete(t.cpus, tid) // LastCPU reads it anew
			if m.state == 'Z' || m.state == 'X' {
				zombies++
			}
			continue
		}
		st, ok := t.readStat(fd)
		if !ok {
			if m != nil {
				m.seqKnown = false
			}
			return false, false
		}
		t.cpus[tid] = st.Processor
		if m != nil {
			m.state = st.State
		}
		switch st.State {
		case 'Z', 'X':
			zombies++
		case 'R':
			t.running[tid] = true
		}
	}
	return true, zombies == len(t.all)
}

// switchSeq returns thread tid's switch sequence (UseSwitches), where
// reads use them and m, its mark, can keep it.
func (t *TaskStates) switchSeq(tid int, m *schedMark) (uint64, bool) {
	if t.switches == nil || m == nil {
		return 0, false
	}
	seq, ok := t.switches(tid)
	if !ok {
		m.seqKnown = false
	}
	return seq, ok
}

// mark returns thread tid's schedstat mark, opening its file on first
// need; nil where marks are not kept (out of file descriptors).
func (t *TaskStates) mark(tid int) *schedMark {
	if t.noKeep {
		return nil
	}
	m := t.sched[tid]
	if m == nil {
		if len(t.sched) >= maxStatFiles {
			return nil
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/task/%d/schedstat", t.pid, tid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1 // no schedstat (a kernel without it): stat lines only
		}
		m = &schedMark{fd: fd}
		t.sched[tid] = m
	}
	return m
}

// stillAsleep reads the thread's schedstat and tells whether the thread
// is still not runnable: its last stat line said so, and it has had no
// turn on a CPU since (its count of turns and its run time stand where
// they stood). A thread woken since but not yet given a CPU counts as
// asleep: it is not on one, which is what a sampler asks. The mark is
// taken before the stat line that follows it, so a turn between the two
// shows at the next read.
func (t *TaskStates) stillAsleep(m *schedMark) bool {
	if m == nil || m.fd < 0 {
		return false
	}
	n, err := preadRaw(m.fd, t.line)
	if err != nil || n == 0 {
		m.known = false
		return false
	}
	ran, turns, ok := parseSchedstat(t.line[:n])
	if !ok {
		m.known = false
		return false
	}
	same := m.known && ran == m.ran && turns == m.turns
	m.ran, m.turns, m.known = ran, turns, true
	return same && m.state != 'R'
}

// parseSchedstat reads the first and third numbers of a schedstat line:
// the thread's time on a CPU (ns) and its count of turns there.
func parseSchedstat(line []byte) (ran, turns uint64, ok bool) {
	var vals [3]uint64
	i := 0
	for f := 0; f < 3; f++ {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		start := i
		for i < len(line) && line[i] >= '0' && line[i] <= '9' {
			vals[f] = vals[f]*10 + uint64(line[i]-'0')
			i++
		}
		if i == start {
			return 0, 0, false
		}
	}
	return vals[0], vals[2], true
}

func (m *schedMark) close() {
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
}

// direntTIDs adds the numeric names of a buffer of linux_dirent64
// records (what getdents64 fills) to tids, without allocating.
func direntTIDs(buf []byte, tids map[int]bool) {
	for len(buf) >= 19 {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < 19 || reclen > len(buf) {
			return
		}
		name := buf[19:reclen]
		tid, ok := 0, len(name) > 0 && name[0] != 0
		for _, c := range name {
			if c == 0 {
				break
			}
			if c < '0' || c > '9' || tid > 1<<30 {
				ok = false
				break
			}
			tid = tid*10 + int(c-'0')
		}
		if ok && tid > 0 {
			tids[tid] = true
		}
		buf = buf[reclen:]
	}
}

// state reads thread tid's stat line; ok is false if the thread is gone.
func (t *TaskStates) state(tid int) (st Stat, ok bool) {
	line, ok := t.stat(tid)
	if !ok {
		return Stat{}, false
	}
	st, err := parseStat(line, false)
	return st, err == nil
}

// readStat reads and parses a stat line through a kept file.
func (t *TaskStates) readStat(fd int) (st Stat, ok bool) {
	for {
		n, err := preadRaw(fd, t.line)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return Stat{}, false
		}
		st, err := parseStat(t.line[:n], false)
		return st, err == nil
	}
}

// LastCPU reads the CPU thread tid is on, or last ran on (field 39 of its
// stat, "processor"), as the last stat line a Read took of it says, when
// the thread has not been switched since (UseSwitches) or that Read was
// the last, and anew otherwise; ok is false if the thread is gone.
func (t *TaskStates) LastCPU(tid int) (cpu int, ok bool) {
	if c, seen := t.cpus[tid]; seen && c >= 0 {
		return c, true
	}
	line, ok := t.stat(tid)
	if !ok {
		return 0, false
	}
	st, err := parseStat(line, false)
	return st.Processor, err == nil && st.Processor >= 0
}

// stat reads thread tid's stat line into t.line, through the kept file
// when there is one; ok is false if the thread is gone.
func (t *TaskStates) stat(tid int) (line []byte, ok bool) {
	fd, kept := t.stats[tid]
	if !kept {
		path := fmt.Sprintf("/proc/%d/task/%d/stat", t.pid, tid)
		var err error
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if (errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)) && len(t.stats) > 0 {
			// Out of file descriptors (many threads, many processes, a low
			// limit): give back the kept ones and open each file when read.
			t.noKeep = true
			t.closeStats()
			fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			return nil, false
		}
		if len(t.stats) < maxStatFiles && !t.noKeep {
			t.stats[tid] = fd
			kept = true
		} else {
			defer unix.Close(fd)
		}
	}
	for {
		n, err := preadRaw(fd, t.line)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			if kept {
				unix.Close(fd)
				delete(t.stats, tid)
			}
			return nil, false
		}
		// The command name may hold anything but is at most 64 bytes, and
		// the 50 numbers after it take under 1024 bytes.
		return t.line[:n], true
	}
}

// closeStats closes the kept stat and schedstat files.
func (t *TaskStates) closeStats() {
	for tid, fd := range t.stats {
		unix.Close(fd)
		delete(t.stats, tid)
	}
	for tid, m := range t.sched {
		m.close()
		delete(t.sched, tid)
	}
}

// Close releases the open files.
func (t *TaskStates) Close() {
	t.closeStats()
	if t.dir >= 0 {
		unix.Close(t.dir)
		t.dir = -1
	}
}

// RunDelay reads how long thread tid of process pid has waited, in all,
// on a CPU's run queue for its turn (the second field of its schedstat).
// The kernel adds a wait when the wait ends, as the thread gets its CPU.
// ok is false if the thread is gone or the kernel keeps no such count.
func RunDelay(pid, tid int) (delay time.Duration, ok bool) {
	return schedstatField(pid, tid, 1)
}

// RunTime reads how long thread tid of process pid has run on a CPU, in
// all (the first field of its schedstat: the scheduler's
// sum_exec_runtime, up to the thread's last scheduler tick when it runs
// now). ok is false if the thread is gone or the kernel keeps no such
// count.
func RunTime(pid, tid int) (ran time.Duration, ok bool) {
	return schedstatField(pid, tid, 0)
}

// schedstatField reads field i of thread tid's schedstat, in nanoseconds.
func schedstatField(pid, tid, i int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) <= i {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(f[i]), 10, 64)
	return time.Duration(ns), err == nil && ns >= 0
}

// fstatRaw is fstat made as a raw system call, as preadRaw is.
func fstatRaw(fd int, st *unix.Stat_t) error {
	_, _, errno := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// preadRaw reads a procfs file from its start with a raw system call: a
// procfs read never blocks, so the Go scheduler need not be told of it
// (a sampler makes such reads at every tick, and telling it each time
// keeps its monitor thread awake).
func preadRaw(fd int, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}
