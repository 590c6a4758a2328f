package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/threadevents"
	"github.com/rbscope/rbscope/internal/unwind"
)

func newThreadsCmd() *cobra.Command {
	var (
		pid                 int
		asJSON, nonblocking bool
		follow, poll        bool
		interval            time.Duration
	)
	c := &cobra.Command{
		Annotations: map[string]string{stopsOnSignal: "yes"},
		Use:         "threads -p PID",
		Short:       "Native and Ruby threads: TIDs, names, states, CPU, stacks; --follow for births and deaths",
		Long: `List every native thread of a Ruby process with its kernel state, CPU time,
CPU use over --interval and machine-stack bytes in use, joined with the Ruby
thread it runs: Thread#name, Ruby status, main or not, GVL holder, innermost
frame. Threads of Ruby's own (the timer thread) and native threads that run
no Ruby code are labelled as such.

--follow prints a line per thread birth and death as they happen, until
Ctrl-C or the process exits. Events come from the kernel's process-events
connector over netlink (no ptrace, nothing stopped); where netlink is not
permitted rbscope polls /proc/PID/task every 2 ms and says so.`,
		Example: `  rbscope threads -p 4242
  rbscope threads -p 4242 --follow`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if pid <= 0 {
				return usageError{fmt.Errorf("--pid is required (see 'rbscope threads --help')")}
			}
			if interval <= 0 || interval > time.Minute {
				return usageError{fmt.Errorf("--interval %v is out of range: give 1ms to 1m", interval)}
			}
			if follow {
				return followThreads(c.Context(), pid, asJSON, poll)
			}
			rows, err := threadTable(c.Context(), pid, interval, !nonblocking)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList("threads", rows)
			}
			printThreadTable(os.Stdout, rows)
			return nil
		},
	}
	f := c.Flags()
	f.IntVarP(&pid, "pid", "p", 0, "process ID of the Ruby process")
	f.BoolVar(&asJSON, "json", false, "print JSON (with --follow: one JSON object per event)")
	f.BoolVar(&nonblocking, "nonblocking", false, "read without pausing the process (stack use only for blocked threads)")
	durationFlag(f, &interval, "interval", "", 200*time.Millisecond, "how long CPU use is measured over")
	f.BoolVar(&follow, "follow", false, "print thread births and deaths as they happen")
	f.BoolVar(&poll, "poll", false, "with --follow: poll /proc instead of using netlink")
	return c
}

// threadRow is one native thread, as `rbscope threads --json` prints it.
type threadRow struct {
	TID        int     `json:"tid"`
	Comm       string  `json:"comm"`
	State      string  `json:"state"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"`
	// StackBytes is the machine stack in use (from the stack pointer to
	// the top of its mapping); null when it could not be read.
	StackBytes *uint64 `json:"stack_bytes"`
	// LargestFrame is the thread's largest native frame (unwound with the
	// code's CFI while the process stood still); null without a pause.
	LargestFrame *largestFrame `json:"largest_frame"`
	// Kind is "ruby" (runs a Ruby thread), "ruby-internal" (Ruby's own
	// timer thread) or "native" (no Ruby thread).
	Kind string      `json:"kind"`
	Ruby *rubyThread `json:"ruby,omitempty"`
}

// largestFrame is a thread's largest native frame: its size and function.
type largestFrame struct {
	Bytes    uint64 `json:"bytes"`
	Function string `json:"function"`
}

type rubyThread struct {
	Name   string        `json:"name"`
	Status string        `json:"status"`
	Main   bool          `json:"main"`
	GVL    bool          `json:"gvl"`
	Frame  *rubyvm.Frame `json:"frame,omitempty"`
}

var kernelStates = map[byte]string{'R': "running", 'S': "sleeping", 'D': "disk-wait", 'T': "stopped", 't': "traced", 'Z': "zombie", 'X': "dead", 'I': "idle"}

func threadTable(ctx context.Context, pid int, interval time.Duration, pause bool) ([]threadRow, error) {
	t, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	before, err := t.Tasks()
	if err != nil {
		return nil, err
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return nil, interrupted(ctx) // interrupted while measuring CPU use
	}
	after, err := t.Tasks() // kernel states, before pausing changes them
	if err != nil {
		return nil, err
	}
	stacks := after
	var threads []rubyvm.Thread
	maps, _ := t.Mappings()
	native := map[int][]unwind.Frame{}
	var u *unwind.Unwinder
	if pause {
		u = unwind.New(t, maps)
		defer u.Close()
		u.Preload() // the CFI is read before the process stops
	}
	read := func(s *target.Stopped) (err error) {
		if s != nil {
			if k, err := t.Tasks(); err == nil {
				stacks = k // every thread is blocked now, so each shows its sp
			}
			for tid := range s.Threads {
				if regs, err := s.Regs(tid); err == nil {
					native[tid], _ = u.Unwind(unwind.FromTarget(regs))
				}
			}
		}
		threads, err = vm.Threads()
		return err
	}
	if pause {
		err = t.WhilePaused(nil, read)
	} else {
		err = read(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	largest := map[int]*largestFrame{}
	for tid, frames := range native { // named once the process runs again
		u.Symbolize(frames)
		for _, f := range frames {
			if lf := largest[tid]; lf == nil || f.Size > lf.Bytes {
				largest[tid] = &largestFrame{Bytes: f.Size, Function: f.Name()}
			}
		}
	}

	cpuBefore := map[int]time.Duration{}
	for _, tk := range before {
		cpuBefore[tk.TID] = tk.CPU
	}
	sp := map[int]uint64{}
	for _, tk := range stacks {
		sp[tk.TID] = tk.SP
	}
	byTID := map[int]rubyvm.Thread{}
	for _, th := range threads {
		tid := th.TID
		if th.Main && !hasTask(after, tid) {
			tid = pid // a forked child's main thread keeps its parent's TID in Ruby's books
		}
		byTID[tid] = th
	}
	mainComm := ""
	for _, tk := range before {
		if tk.TID == pid {
			mainComm = tk.Comm
		}
	}
	rows := make([]threadRow, 0, len(after))
	for _, tk := range after {
		row := threadRow{TID: tk.TID, Comm: tk.Comm, State: kernelStates[tk.State], CPUSeconds: tk.CPU.Seconds(), Kind: "native", LargestFrame: largest[tk.TID]}
		if row.State == "" {
			row.State = string(tk.State)
		}
		if prev, ok := cpuBefore[tk.TID]; ok {
			row.CPUPercent = 100 * (tk.CPU - prev).Seconds() / interval.Seconds()
		}
		if s := sp[tk.TID]; s != 0 {
			if m, ok := target.FindMapping(maps, s); ok {
				used := m.End - s
				row.StackBytes = &used
			}
		}
		if th, ok := byTID[tk.TID]; ok {
			row.Kind = "ruby"
			rt := &rubyThread{Name: th.Name, Status: th.Status, Main: th.Main, GVL: th.GVL}
			if len(th.Frames) > 0 {
				f := th.Frames[0]
				rt.Frame = &f
			}
			row.Ruby = rt
		} else if vm.Layout.TimerThreadNamed == 1 && tk.TID != pid && tk.Comm == mainComm {
			// Ruby 3.2+ runs a timer thread that carries the process name.
			row.Kind = "ruby-internal"
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func hasTask(tasks []target.Task, tid int) bool {
	for _, t := range tasks {
		if t.TID == tid {
			return true
		}
	}
	return false
}

func printThreadTable(w io.Writer, rows []threadRow) {
	fmt.Fprintf(w, "%-8s %-16s %-9s %8s %6s %8s %8s  %-20s %-6s %-4s %s\n", "TID", "COMM", "STATE", "CPU", "CPU%", "STACK", "BIGFRAME", "RUBY THREAD", "STATUS", "GVL", "FRAME")
	for _, r := range rows {
		stack, big := "-", "-"
		if r.StackBytes != nil {
			stack = humanBytes(*r.StackBytes)
		}
		if r.LargestFrame != nil {
			big = humanBytes(r.LargestFrame.Bytes)
		}
		name, status, gvl, frame := "", "", "", ""
		switch r.Kind {
		case "ruby":
			name = r.Ruby.Name
			if r.Ruby.Main {
				if name == "" {
					name = "main"
				}
				name += " (main)"
			}
			if name == "" {
				name = "(unnamed)"
			}
			status = r.Ruby.Status
			if r.Ruby.GVL {
				gvl = "yes"
			}
			if f := r.Ruby.Frame; f != nil {
				frame = f.Label
				if f.Kind == rubyvm.KindRuby {
					frame += fmt.Sprintf(" (%s:%d)", f.Path, f.Line)
				}
			}
		case "ruby-internal":
			name = "[Ruby timer thread]"
		default:
			name = "[native, no Ruby]"
		}
		if lf := r.LargestFrame; lf != nil && lf.Bytes >= largeFrame {
			frame += "  [large native frame: " + lf.Function + "]"
		}
		fmt.Fprintf(w, "%-8d %-16s %-9s %7.2fs %5.1f%% %8s %8s  %-20s %-6s %-4s %s\n", r.TID, textsafe.Clean(r.Comm), r.State, r.CPUSeconds, r.CPUPercent, stack, big, textsafe.Clean(name), status, gvl, textsafe.Clean(frame))
	}
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// followEvent is one line of `rbscope threads --follow --json`.
type followEvent struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"` // born, exited, native-born, native-exited
	TID   int       `json:"tid"`
	Name  string    `json:"name,omitempty"`
	// Creator is the outermost Ruby frame of a new thread: the block given
	// to Thread.new, at the line that created it.
	Creator  string  `json:"created_at,omitempty"`
	Lifetime float64 `json:"lifetime_seconds,omitempty"`
}

// rubyPollInterval is how often --follow re-reads Ruby's thread list (no
// pause): Ruby may run a new Ruby thread on a cached native thread, which
// the kernel does not report.
const rubyPollInterval = 2 * time.Millisecond

type followedThread struct {
	tid     int
	name    string
	creator string
	born    time.Time
	printed bool
}

func followThreads(ctx context.Context, pid int, asJSON, poll bool) error {
	_, vm, closeAll, err := openRuby(pid)
	if err != nil {
		return err
	}
	defer closeAll()
	native, src, fallback := threadevents.Watch(ctx, pid, poll)
	if fallback != nil && !poll {
		fmt.Fprintf(os.Stderr, "rbscope: netlink process events unavailable (%v); polling /proc/%d/task every %v\n", fallback, pid, threadevents.PollInterval)
	}
	fmt.Fprintf(os.Stderr, "rbscope: following threads of pid %d (Ruby %s): native threads via %s, Ruby threads by reading the VM every %v; Ctrl-C to stop\n", pid, vm.Version, src, rubyPollInterval)

	emit := func(ev followEvent) {
		if asJSON {
			b, _ := versioned(ev) // one JSON object per line
			fmt.Println(string(b))
			return
		}
		line := fmt.Sprintf("%s %-13s tid=%d", ev.Time.Format("15:04:05.000"), ev.Event, ev.TID)
		if ev.Name != "" {
			line += fmt.Sprintf(" %q", ev.Name)
		}
		if ev.Creator != "" {
			line += " created at " + ev.Creator
		}
		if strings.HasSuffix(ev.Event, "exited") && ev.Lifetime > 0 {
			line += fmt.Sprintf(" after %v", time.Duration(ev.Lifetime*float64(time.Second)).Round(time.Millisecond))
		}
		fmt.Println(line)
	}
	ruby := map[uint64]*followedThread{} // by Thread object
	everRuby := map[int]bool{}           // TIDs that ran a Ruby thread
	nativeBorn := map[int]time.Time{}
	nativePending := map[int]time.Time{} // native births not yet known not to be Ruby's
	printBirth := func(ft *followedThread) {
		if !ft.printed {
			ft.printed = true
			emit(followEvent{Time: ft.born, Event: "born", TID: ft.tid, Name: ft.name, Creator: ft.creator})
		}
	}
	first := true
	scan := func() {
		threads, err := vm.ReadThreads(nil)
		for i := 0; err != nil && i < 3; i++ {
			threads, err = vm.ReadThreads(nil) // torn by a thread being born or dying
		}
		if err != nil {
			return
		}
		now := time.Now()
		seen := map[uint64]bool{}
		var fresh bool
		for _, th := range threads {
			seen[th.Self] = true
			ft, ok := ruby[th.Self]
			if !ok {
				ft = &followedThread{tid: th.TID, born: now, printed: first}
				ruby[th.Self] = ft
				fresh = true
			}
			ft.tid = th.TID
			if th.Name != "" {
				ft.name = th.Name
			} else if th.Main {
				ft.name = "main"
			}
		}
		needCreator := false
		for _, ft := range ruby {
			needCreator = needCreator || (!ft.printed && ft.creator == "")
		}
		if fresh && !first || needCreator {
			// Read the new threads' stacks once for the frame that made them.
			if full, err := vm.Threads(); err == nil {
				for _, th := range full {
					if ft := ruby[th.Self]; ft != nil && ft.creator == "" && !ft.printed {
						for i := len(th.Frames) - 1; i >= 0; i-- {
							if f := th.Frames[i]; f.Kind == rubyvm.KindRuby {
								ft.creator = fmt.Sprintf("%s (%s:%d)", f.Label, f.Path, f.Line)
								break
							}
						}
					}
				}
			}
		}
		first = false
		for self, ft := range ruby {
			if !seen[self] {
				if !ft.printed && ft.tid == 0 {
					// Never seen with a native thread: a half-made thread
					// read mid-change, or one too short to matter. Drop it.
					delete(ruby, self)
					continue
				}
				printBirth(ft)
				emit(followEvent{Time: now, Event: "exited", TID: ft.tid, Name: ft.name, Creator: ft.creator, Lifetime: now.Sub(ft.born).Seconds()})
				delete(ruby, self)
				continue
			}
			if ft.tid != 0 {
				everRuby[ft.tid] = true
			}
			// A name usually follows within a few ms (Thread.current.name=),
			// and on Ruby 3.3 the native thread is assigned just after birth.
			if !ft.printed && ft.tid != 0 && (ft.name != "" || now.Sub(ft.born) > 50*time.Millisecond) {
				printBirth(ft)
			}
		}
		for tid, at := range nativePending {
			switch {
			case everRuby[tid]:
				delete(nativePending, tid)
			case now.Sub(at) > 50*time.Millisecond:
				delete(nativePending, tid)
				nativeBorn[tid] = at
				comm := ""
				if tk, err := target.ReadTask(pid, tid); err == nil {
					comm = tk.Comm
				}
				emit(followEvent{Time: at, Event: "native-born", TID: tid, Name: comm})
			}
		}
	}
	scan()
	tick := time.NewTicker(rubyPollInterval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-native:
			if !ok {
				scan()
				for _, ft := range ruby {
					printBirth(ft)
				}
				if ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "rbscope: pid %d exited\n", pid)
				}
				return nil
			}
			scan()
			if everRuby[ev.TID] {
				continue // reported as a Ruby thread
			}
			switch ev.Kind {
			case threadevents.Born:
				nativePending[ev.TID] = ev.Time
			case threadevents.Exited:
				if _, ok := nativePending[ev.TID]; ok {
					delete(nativePending, ev.TID)
					emit(followEvent{Time: ev.Time, Event: "native-born", TID: ev.TID})
					nativeBorn[ev.TID] = ev.Time
				}
				out := followEvent{Time: ev.Time, Event: "native-exited", TID: ev.TID}
				if b, ok := nativeBorn[ev.TID]; ok {
					out.Lifetime = ev.Time.Sub(b).Seconds()
					delete(nativeBorn, ev.TID)
				}
				emit(out)
			}
		case <-tick.C:
			scan()
		}
	}
}
