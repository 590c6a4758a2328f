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
	// again when one of them has gone or the count the leader's line
	// gives differs.
	listed bool
}

// ErrGone is what Read returns once the process has exited: its task
// directory is gone, or every thread of it is a zombie.
var ErrGone = errors.New("the process has exited")

// NewTaskStates reads the thread states of process pid; Close releases it.
func NewTaskStates(pid int) *TaskStates {
	return &TaskStates{pid: pid, dir: -1, stats: map[int]int{}, names: make([]byte, 8192), line: make([]byte, 1024),
		running: map[int]bool{}, all: map[int]bool{}}
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
	}
	if zombies == len(all) {
		return nil, nil, fmt.Errorf("pid %d: %w", t.pid, ErrGone)
	}
	t.listed = !t.noKeep && len(t.stats) == len(all)
	return running, all, nil
}

// reread reads again the stat lines of the threads last listed, through
// their kept files. ok is false when the list must be made again: a
// thread has gone, or the leader's line counts other threads than the
// list holds. gone is set when every thread is a zombie.
func (t *TaskStates) reread() (ok, gone bool) {
	clear(t.running)
	zombies := 0
	for tid := range t.all {
		fd, kept := t.stats[tid]
		if !kept {
			return false, false
		}
		st, ok := t.readStat(fd)
		if !ok {
			return false, false
		}
		if tid == t.pid && st.NumThreads != len(t.all) {
			return false, false
		}
		switch st.State {
		case 'Z', 'X':
			zombies++
		case 'R':
			t.running[tid] = true
		}
	}
	if _, leader := t.all[t.pid]; !leader {
		return false, false // no count to check the list against
	}
	return true, zombies == len(t.all)
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
// stat, "processor"); ok is false if the thread is gone.
func (t *TaskStates) LastCPU(tid int) (cpu int, ok bool) {
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

// closeStats closes the kept stat files.
func (t *TaskStates) closeStats() {
	for tid, fd := range t.stats {
		unix.Close(fd)
		delete(t.stats, tid)
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(f[1]), 10, 64)
	return time.Duration(ns), err == nil && ns >= 0
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
