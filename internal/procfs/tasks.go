package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Task is what the kernel says of one thread of a live process.
type Task struct {
	TID   int
	Comm  string // thread name
	State byte   // R, S, D, T, t, Z ...
	// CPU is user plus system time consumed so far.
	CPU time.Duration
	// Start is when the thread started, as time since boot.
	Start time.Duration
	// SP and PC are the thread's stack pointer and program counter when it
	// is blocked (in a system call or stopped); zero while it runs.
	SP, PC uint64
}

// ReadTask reads thread tid of process pid: its stat and syscall files.
func ReadTask(pid, tid int) (Task, error) {
	st, err := ReadStat(pid, tid)
	if err != nil {
		return Task{}, err
	}
	t := Task{TID: tid, Comm: st.Comm, State: st.State, CPU: st.CPU(), Start: st.Start()}
	if sc, err := os.ReadFile(filepath.Join(taskDir(pid, tid), "syscall")); err == nil {
		t.SP, t.PC = parseSyscall(string(sc))
	}
	return t, nil
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
