package target

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/procfs"
)

// Tasks reads the kernel's view of every thread of the process.
func (l *Live) Tasks() ([]procfs.Task, error) {
	tids, err := l.Threads()
	if err != nil {
		return nil, err
	}
	out := make([]procfs.Task, 0, len(tids))
	for _, tid := range tids {
		t, err := procfs.ReadTask(l.pid, tid)
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
