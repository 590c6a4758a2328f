package target

import (
	"sync"

	"github.com/rbscope/rbscope/internal/procfs"
)

// nsTIDs maps the thread IDs a process in a PID namespace of its own
// knows itself by to those rbscope's /proc lists.
type nsTIDs struct {
	mu     sync.Mutex
	looked bool        // whether the process's namespace was looked at
	nested bool        // the process's IDs differ from /proc's
	local  map[int]int // inner TID -> /proc's TID
	seen   map[int]int // /proc's TID -> inner TID, for every task read
}

// LocalTID returns the ID under which rbscope's /proc lists the thread of
// the process that the process itself knows as tid: gettid() inside its
// own PID namespace (a container's), which is what Ruby keeps in its
// memory. In the same namespace as rbscope's /proc, the two are one and
// tid comes back unchanged. In another, the kernel's NSpid line of each
// task's status says both IDs; a tid that names no thread of the process
// gives 0, so an ID read from the process's memory never names another
// process's thread.
func (l *Live) LocalTID(tid int) int {
	n := &l.ns
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.looked {
		n.looked = true
		if ids, ok := nsPIDs(l.pid, 0); ok && len(ids) > 1 {
			n.nested = true
			n.local, n.seen = map[int]int{}, map[int]int{}
		}
	}
	if !n.nested {
		return tid
	}
	if tid <= 0 {
		return 0
	}
	if t, ok := n.local[tid]; ok && l.hasThread(t) {
		return t
	}
	// A thread born (or an ID reused) since the last look: read the
	// status of each task not read yet, and forget those that ended.
	tids, err := l.Threads()
	if err != nil {
		return 0
	}
	alive := make(map[int]bool, len(tids))
	for _, t := range tids {
		alive[t] = true
		if _, ok := n.seen[t]; ok {
			continue
		}
		ids, ok := nsPIDs(l.pid, t)
		if !ok || len(ids) < 2 || ids[0] != t {
			continue
		}
		inner := ids[len(ids)-1]
		n.seen[t] = inner
		n.local[inner] = t
	}
	for t, inner := range n.seen {
		if !alive[t] {
			delete(n.seen, t)
			if n.local[inner] == t {
				delete(n.local, inner)
			}
		}
	}
	return n.local[tid]
}

// nsPIDs reads the NSpid line of the status of thread tid of process pid
// (the process when tid is 0): the task's ID in each PID namespace from
// /proc's own down to the task's.
func nsPIDs(pid, tid int) ([]int, bool) {
	st, err := procfs.ReadStatus(pid, tid)
	return st.NSpid, err == nil && len(st.NSpid) > 0
}
