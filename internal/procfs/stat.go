// Package procfs is rbscope's one reader of Linux's /proc: a process's or
// thread's stat, status, syscall and maps files, the listing of its
// threads, and the rule that tells a Ruby process by what it maps. Every
// other package asks here. Where what is read is a file the target
// process shapes (a command name, a mapped path), the parsers trust none
// of its bytes.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	prom "github.com/prometheus/procfs"
)

// Root is where the kernel's process filesystem is mounted.
const Root = "/proc"

// ClockTick is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const ClockTick = 100

// Stat is what rbscope reads of a stat file (proc_pid_stat(5)).
type Stat struct {
	// Comm is the command (thread) name. The process chooses it (up to 15
	// bytes of anything, ")" and newlines included).
	Comm string
	// State is the state letter: R, S, D, T, t, Z, X, I ...
	State byte
	PPID  int
	// UTime and STime are the CPU time spent in user and kernel mode, and
	// StartTime when the task started, since boot, all in clock ticks.
	UTime, STime, StartTime uint64
	// Processor is the CPU the task last ran on (-1 when the line stops
	// short of it).
	Processor int
	// NumThreads is how many threads the process has.
	NumThreads int
}

// CPU is the task's user plus system time so far.
func (s Stat) CPU() time.Duration {
	return time.Duration(s.UTime+s.STime) * time.Second / ClockTick
}

// Start is when the task started, as time since boot.
func (s Stat) Start() time.Duration {
	return time.Duration(s.StartTime) * time.Second / ClockTick
}

// ErrBadStat means a stat line is cut short or malformed.
var ErrBadStat = errors.New("malformed stat line")

// ParseStat parses one stat line: rbscope's one stat parser, cheap enough
// for a sampler that reads every thread's many times a second (it
// allocates only the name). The command name is whatever lies between the
// first '(' and the last ')', since the name itself may hold parentheses,
// spaces and newlines; the numbered fields are counted from there. Fields
// past the end of a short line (an old kernel's) are left zero, but the
// state, ppid, times and start time must be there.
func ParseStat(line []byte) (Stat, error) { return parseStat(line, true) }

// parseStat is ParseStat, which leaves Comm empty unless withComm: the
// sampler's task states read no name, and allocate nothing.
func parseStat(line []byte, withComm bool) (Stat, error) {
	open, close := bytes.IndexByte(line, '('), bytes.LastIndexByte(line, ')')
	if open < 0 || close < open {
		return Stat{}, fmt.Errorf("%w: no command name", ErrBadStat)
	}
	s := Stat{Processor: -1}
	if withComm {
		s.Comm = string(line[open+1 : close])
	}
	// Fields after the name, numbered as in proc_pid_stat(5): 3 is the
	// state.
	rest := line[close+1:]
	field := 2
	for len(rest) > 0 {
		i := 0
		for i < len(rest) && isSpace(rest[i]) {
			i++
		}
		j := i
		for j < len(rest) && !isSpace(rest[j]) {
			j++
		}
		if i == j {
			break
		}
		f := rest[i:j]
		rest = rest[j:]
		field++
		var bad bool
		switch field {
		case 3:
			s.State = f[0]
		case 4:
			s.PPID, bad = atoi(f)
		case 14:
			s.UTime, bad = atou(f)
		case 15:
			s.STime, bad = atou(f)
		case 20:
			s.NumThreads, bad = atoi(f)
		case 22:
			s.StartTime, bad = atou(f)
		case 39:
			s.Processor, bad = atoi(f)
		}
		if bad {
			return Stat{}, fmt.Errorf("%w: field %d is %q", ErrBadStat, field, f)
		}
		if field == 39 {
			break
		}
	}
	if field < 22 {
		return Stat{}, fmt.Errorf("%w: %d fields", ErrBadStat, field)
	}
	return s, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' }

// atou parses a decimal number; bad is set when f is not one.
func atou(f []byte) (n uint64, bad bool) {
	if len(f) == 0 || len(f) > 20 {
		return 0, true
	}
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, true
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, true
		}
		n = n*10 + d
	}
	return n, false
}

// atoi parses a decimal int, perhaps negative.
func atoi(f []byte) (int, bool) {
	neg := len(f) > 0 && f[0] == '-'
	if neg {
		f = f[1:]
	}
	n, bad := atou(f)
	if bad || n > 1<<62 {
		return 0, true
	}
	if neg {
		return -int(n), false
	}
	return int(n), false
}

// taskDir is the /proc directory of thread tid of process pid, or of the
// process itself when tid is 0.
func taskDir(pid, tid int) string {
	if tid == 0 {
		return filepath.Join(Root, strconv.Itoa(pid))
	}
	return filepath.Join(Root, strconv.Itoa(pid), "task", strconv.Itoa(tid))
}

// ReadStat reads the stat file of thread tid of process pid, or of the
// process when tid is 0.
func ReadStat(pid, tid int) (Stat, error) {
	return ReadStatFile(filepath.Join(taskDir(pid, tid), "stat"))
}

// ReadStatFile reads and parses the stat file at path (one under another
// mount of /proc, or a copy of one).
func ReadStatFile(path string) (Stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Exited reports whether process pid is gone or a zombie (exited, not yet
// reaped).
func Exited(pid int) bool { return TaskExited(pid, 0) }

// TaskExited reports whether thread tid of process pid (the process when
// tid is 0) is gone or a zombie.
func TaskExited(pid, tid int) bool {
	s, err := ReadStat(pid, tid)
	return err != nil || s.State == 'Z' || s.State == 'X'
}

// Tasks lists the thread IDs of process pid, in order.
func Tasks(pid int) ([]int, error) {
	f, err := os.Open(filepath.Join(taskDir(pid, 0), "task"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	sort.Ints(tids)
	return tids, nil
}

// PIDs lists the processes under root (normally Root), in order.
func PIDs(root string) ([]int, error) {
	fs, err := prom.NewFS(root)
	if err != nil {
		return nil, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.PID
	}
	sort.Ints(pids)
	return pids, nil
}
