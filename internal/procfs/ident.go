package procfs

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxCmdline bounds how much of a command line is read: a process chooses
// its own, and may make it as long as the kernel lets it.
const maxCmdline = 64 << 10

// Comm returns the kernel's name of process pid (of its thread tid, when
// tid is not 0), empty when it cannot be read. The process chooses it:
// quote it before it reaches a terminal.
func Comm(pid, tid int) string {
	f, err := os.Open(filepath.Join(taskDir(pid, tid), "comm"))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 256)) // the kernel's are 16 bytes
	return strings.TrimSuffix(string(b), "\n")
}

// Exe returns the path of process pid's executable as the process sees it
// (the text of the exe link, never opened), empty when it cannot be read.
func Exe(pid int) string {
	p, _ := os.Readlink(filepath.Join(taskDir(pid, 0), "exe"))
	return p
}

// Args returns the arguments of process pid's command line under root
// (normally Root), at most maxCmdline bytes of them; nil when they cannot
// be read.
func Args(root string, pid int) []string {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxCmdline))
	if s := strings.TrimRight(string(b), "\x00"); s != "" {
		return strings.Split(s, "\x00")
	}
	return nil
}

// Cmdline returns process pid's command line under root (normally Root),
// its arguments joined by spaces (Args).
func Cmdline(root string, pid int) string {
	return strings.TrimSpace(strings.Join(Args(root, pid), " "))
}

// HasTask reports whether process pid has a thread tid now (one not yet
// reaped).
func HasTask(pid, tid int) bool {
	if tid <= 0 {
		return false
	}
	_, err := os.Stat(taskDir(pid, tid))
	return err == nil
}

// Owner returns the user and group IDs that own process pid (its /proc
// directory's), and false when it cannot be read.
func Owner(pid int) (uid, gid uint32, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(taskDir(pid, 0), &st); err != nil {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}
