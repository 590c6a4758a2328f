package procfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ProcessFiles are the /proc files of a process that a crash report
// keeps, as the kernel wrote them (the process chooses much of them: its
// mappings' names, its environment, its descriptors' targets).
type ProcessFiles struct {
	Maps, Status, Limits, Cgroup string
	// Cwd is the text of the cwd link; FDs the text of each descriptor's
	// link, by descriptor number.
	Cwd string
	FDs map[string]string
	// Environ is the initial environment, "KEY=value" entries.
	Environ []string
}

// Bounds on what ReadProcessFiles reads of one process.
const (
	maxMapsFile  = 8 << 20
	maxSmallFile = 64 << 10
	maxEnviron   = 1 << 20
	maxFDs       = 4096
)

// ReadProcessFiles reads process pid's files a crash report keeps, each
// within a bound, and says what it could not read or cut short.
func ReadProcessFiles(pid int) (ProcessFiles, []string) {
	dir := taskDir(pid, 0)
	var problems []string
	read := func(name string, limit int64) string {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			problems = append(problems, "/proc: "+err.Error())
			return ""
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, limit+1))
		if err != nil {
			problems = append(problems, fmt.Sprintf("/proc: reading %s: %v", name, err))
		}
		if int64(len(b)) > limit {
			b = b[:limit]
			problems = append(problems, fmt.Sprintf("/proc: %s cut at %d bytes", name, limit))
		}
		return string(b)
	}
	s := ProcessFiles{
		Maps:   read("maps", maxMapsFile),
		Status: read("status", maxSmallFile),
		Limits: read("limits", maxSmallFile),
		Cgroup: read("cgroup", maxSmallFile),
		FDs:    map[string]string{},
	}
	s.Cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
	if f, err := os.Open(filepath.Join(dir, "fd")); err == nil {
		names, _ := f.Readdirnames(maxFDs)
		f.Close()
		if len(names) == maxFDs {
			problems = append(problems, fmt.Sprintf("/proc: only the first %d descriptors listed", maxFDs))
		}
		for _, n := range names {
			s.FDs[n], _ = os.Readlink(filepath.Join(dir, "fd", n))
		}
	}
	if env := read("environ", maxEnviron); env != "" {
		for _, kv := range strings.Split(env, "\x00") {
			if kv != "" {
				s.Environ = append(s.Environ, kv)
			}
		}
	}
	return s, problems
}
