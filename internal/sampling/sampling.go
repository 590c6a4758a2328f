// Package sampling holds the terms the two samplers share, the sampler
// that reads stacks from user space (internal/sampler) and the one that
// copies them in the kernel (internal/ebpfsample): the rate's bound, a
// recording's progress, the frames of the GC's phases and how a thread is
// named in profiles.
package sampling

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

// MaxRate is the highest sampling rate accepted, in Hz.
const MaxRate = 1000

// Progress is the state of a recording for a status line.
type Progress struct {
	Elapsed   time.Duration
	Ticks     int
	Samples   int
	Errors    int
	Processes int
}

// ProfileFrame is a Ruby stack's frame as profiles keep it.
func ProfileFrame(f rubyvm.Frame) profile.Frame {
	return profile.Frame{Kind: profile.Kind(f.Kind), Label: f.Label, Path: f.Path, Line: f.Line, Method: f.Method}
}

// gcFrames are the frames a sample gets above the Ruby stack of the thread
// holding the GVL while the GC runs, by phase.
var gcFrames = map[rubyvm.GCPhase][]profile.Frame{
	rubyvm.GCMarking:  {{Kind: profile.KindGC, Label: profile.LabelGC}, {Kind: profile.KindGC, Label: profile.LabelMarking}},
	rubyvm.GCSweeping: {{Kind: profile.KindGC, Label: profile.LabelGC}, {Kind: profile.KindGC, Label: profile.LabelSweeping}},
	rubyvm.GCOther:    {{Kind: profile.KindGC, Label: profile.LabelGC}},
}

// GCFrames are the frames a sample gets above the Ruby stack of the thread
// holding the GVL while the GC is in phase (none when it is idle), as the
// sampler adds them: for other samplers' profiles (record --ebpf). The
// slice is shared: append it, never change it.
func GCFrames(phase rubyvm.GCPhase) []profile.Frame { return gcFrames[phase] }

// ThreadCut is a --thread cut as the samplers apply it (record, top): it
// matches threads by their names in profiles (ThreadName) and TIDs
// (profile.ThreadMatch), once for each thread, and remembers the threads
// it was asked about, so that a cut that matched none can say what there
// was. Safe for concurrent use.
type ThreadCut struct {
	spec    string
	m       profile.ThreadMatch
	mu      sync.Mutex
	seen    map[threadKey]bool // a thread -> whether it matches
	matched bool
}

type threadKey struct {
	name string
	tid  int
}

// NewThreadCut returns the cut of the threads spec (NAME|TID) names.
func NewThreadCut(spec string) *ThreadCut {
	return &ThreadCut{spec: spec, m: profile.NewThreadMatch(spec), seen: map[threadKey]bool{}}
}

// Keep reports whether the thread named name (as profiles name it) with
// TID tid is in the cut: the ebpf sampler's filter.
func (c *ThreadCut) Keep(name string, tid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := threadKey{name, tid}
	ok, known := c.seen[k]
	if !known {
		ok = c.m.Match(name, tid)
		c.seen[k] = ok
		c.matched = c.matched || ok
	}
	return ok
}

// Filter is Keep as the user-space sampler's filter
// (sampler.Options.ThreadFilter), which it asks of every thread at each
// tick.
func (c *ThreadCut) Filter() func(rubyvm.Thread) bool {
	return func(th rubyvm.Thread) bool { return c.Keep(ThreadName(th), th.TID) }
}

// Asked reports whether the cut was asked about any thread yet.
func (c *ThreadCut) Asked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen) > 0
}

// Unmatched says that no thread the samplers were asked about matched,
// naming those they were (at most 20), or returns nil.
func (c *ThreadCut) Unmatched() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.matched {
		return nil
	}
	var seen []string
	for k := range c.seen {
		seen = append(seen, fmt.Sprintf("%q (tid %d)", k.name, k.tid))
	}
	slices.Sort(seen)
	list := "none"
	if len(seen) > 20 {
		seen = append(seen[:20], fmt.Sprintf("and %d more", len(seen)-20))
	}
	if len(seen) > 0 {
		list = strings.Join(seen, ", ")
	}
	return profile.NoMatchError{Msg: fmt.Sprintf("--thread %q: no thread of the process is named so (whole, or as a regular expression) or has that TID; its threads: %s", c.spec, list)}
}

// ThreadName is how a thread is named in profiles: Thread#name, "main"
// for the unnamed main thread, else "tid N".
func ThreadName(th rubyvm.Thread) string {
	switch {
	case th.Name != "":
		return th.Name
	case th.Main:
		return "main"
	default:
		return "tid " + strconv.Itoa(th.TID)
	}
}
