package target

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Task is what the kernel says of one thread of a live process.
type Task struct {
	TID   int
	Comm  string // thread name (/proc/PID/task/TID/comm)
	State byte   // R, S, D, T, t, Z ...
	// CPU is user plus system time consumed so far.
	CPU time.Duration
	// Start is when the thread started, as time since boot.
	Start time.Duration
	// SP and PC are the thread's stack pointer and program counter when it
	// is blocked (in a system call or stopped); zero while it runs.
	SP, PC uint64
}

// clockTick is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTick = 100

// Tasks reads the kernel's view of every thread of the process.
func (l *Live) Tasks() ([]Task, error) {
	tids, err := l.Threads()
	if err != nil {
		return nil, err
	}
	out := make([]Task, 0, len(tids))
	for _, tid := range tids {
		t, err := ReadTask(l.pid, tid)
		if err != nil {
			continue // the thread ended while we listed
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pid %d: %w", l.pid, ErrExited)
	}
	return out, nil
}

// ReadTask reads one thread's /proc entries.
func ReadTask(pid, tid int) (Task, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(tid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Task{}, err
	}
	t, err := parseStat(tid, string(stat))
	if err != nil {
		return Task{}, err
	}
	if sc, err := os.ReadFile(filepath.Join(dir, "syscall")); err == nil {
		t.SP, t.PC = parseSyscall(string(sc))
	}
	return t, nil
}

// parseStat reads the fields rbscope uses from a /proc stat line.
func parseStat(tid int, s string) (Task, error) {
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return Task{}, fmt.Errorf("bad stat line %q", s)
	}
	f := strings.Fields(s[close+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15, starttime 22.
	if len(f) < 20 {
		return Task{}, fmt.Errorf("bad stat line %q", s)
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return Task{
		TID:   tid,
		Comm:  s[open+1 : close],
		State: f[0][0],
		CPU:   time.Duration(utime+stime) * time.Second / clockTick,
		Start: time.Duration(start) * time.Second / clockTick,
	}, nil
}

// StatState returns the state letter (R, S, D, Z ...) of a /proc/.../stat
// line, or 0 if the line is cut short.
func StatState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// Exited reports whether process pid is gone or a zombie (exited, not yet
// reaped).
func Exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	st := StatState(b)
	return st == 'Z' || st == 'X'
}

// parseSyscall reads the stack pointer and pc from /proc/.../syscall:
// "NR ARG1..ARG6 SP PC" in a system call, "-1 SP PC" when blocked outside
// one, "running" otherwise.
func parseSyscall(s string) (sp, pc uint64) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0
	}
	sp, _ = strconv.ParseUint(strings.TrimPrefix(f[len(f)-2], "0x"), 16, 64)
	pc, _ = strconv.ParseUint(strings.TrimPrefix(f[len(f)-1], "0x"), 16, 64)
	return sp, pc
}
