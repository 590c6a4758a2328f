package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/discover"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// TestRefuse: a process is refused for good only for what will not change
// while it lives (not Ruby, an unsupported version, no permission); a
// failure that may pass (a Ruby still starting) is tried again; notices
// are said once per kind of failure, whatever their messages.
func TestRefuse(t *testing.T) {
	var log strings.Builder
	a := New(Config{Log: &log}, NewMetrics())
	p := discover.Process{PID: 100, Start: 5}
	a.refuse(p, fmt.Errorf("pid 100 at 0x1000: %w", rubyvm.ErrGarbage))
	a.refuse(discover.Process{PID: 101}, fmt.Errorf("pid 101 at 0x2000: %w", rubyvm.ErrGarbage))
	if len(a.refused) != 0 {
		t.Errorf("a temporary failure refuses for good: %v", a.refused)
	}
	if n := strings.Count(log.String(), "\n"); n != 1 {
		t.Errorf("two failures of one kind said %d times:\n%s", n, log.String())
	}
	a.refuse(p, fmt.Errorf("pid 100: %w", rubyvm.ErrNotRuby))
	a.refuse(discover.Process{PID: 102, Start: 6}, fmt.Errorf("pid 102: %w", target.ErrPermission))
	a.refuse(discover.Process{PID: 103, Start: 7}, fmt.Errorf("pid 103: %w", target.ErrExited))
	if len(a.refused) != 2 || a.refused[process{100, 5}] == "" || a.refused[process{102, 6}] == "" {
		t.Errorf("refused %v, want pids 100 and 102 with their start times", a.refused)
	}
	if len(a.said) != 2 {
		t.Errorf("said kinds %v, want attach:%v and permission", a.said, rubyvm.ErrGarbage)
	}
}
