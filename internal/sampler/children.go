package sampler

import (
	"unicode/utf8"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// maxTitle bounds a process title in a root frame's label, in bytes.
const maxTitle = 120

// processTitle is the command line of pid as ps shows it (a server's
// workers set theirs to say what they are), made printable and cut to
// maxTitle bytes; "" when it cannot be read.
func processTitle(pid int) string {
	t := textsafe.Clean(procfs.Cmdline(procfs.Root, pid))
	if len(t) > maxTitle {
		n := maxTitle
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n] + "..."
	}
	return t
}

// scanChildren attaches to new descendants of the root process and returns
// how many it added.
func (s *Sampler) scanChildren() int {
	parents := map[int]int{}
	pids, err := procfs.PIDs(procfs.Root)
	if err != nil {
		return 0
	}
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid, 0); err == nil {
			parents[pid] = st.PPID
		}
	}
	added := 0
	for pid := range parents {
		if _, ok := s.procs[pid]; ok || pid == s.root || s.ignored[pid] >= 5 {
			continue
		}
		if !descends(parents, pid, s.root) {
			continue
		}
		p, err := attach(pid, s.opts)
		if err != nil {
			s.ignored[pid]++ // not Ruby (yet): try again a few times
			continue
		}
		s.procs[pid] = p
		added++
	}
	return added
}

func descends(parents map[int]int, pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		pid = parents[pid]
		if pid == root {
			return true
		}
	}
	return false
}
