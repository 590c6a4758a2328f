package threads

import (
	"context"
	"fmt"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
)

// Event is one birth or death (one line of `rbscope threads --follow --json`).
type Event struct {
	Time  time.Time
	Event string // born, exited, native-born, native-exited
	TID   int
	Name  string
	// Creator is the outermost Ruby frame of a new thread: the block given
	// to Thread.new, at the line that created it.
	Creator string
	// Lifetime is how long the thread lived, in seconds (deaths).
	Lifetime float64
}

// RubyPollInterval is how often Follow re-reads Ruby's thread list (no
// pause): Ruby may run a new Ruby thread on a cached native thread, which
// the kernel does not report.
const RubyPollInterval = 2 * time.Millisecond

type followedThread struct {
	tid     int
	name    string
	creator string
	born    time.Time
	printed bool
}

// Follow reports each thread birth and death of pid (read through r) to
// emit until native closes (the process exited: exited is then true) or
// ctx ends: native threads from native, the kernel's events of them
// (Watch), Ruby threads by re-reading the VM's thread list, told apart
// because Ruby runs new Ruby threads on cached native threads the kernel
// says nothing of.
func Follow(ctx context.Context, pid int, r *stacks.Reader, native <-chan TaskEvent, emit func(Event)) (exited bool) {
	ruby := map[uint64]*followedThread{} // by Thread object
	everRuby := map[int]bool{}           // TIDs that ran a Ruby thread
	nativeBorn := map[int]time.Time{}
	nativePending := map[int]time.Time{} // native births not yet known not to be Ruby's
	printBirth := func(ft *followedThread) {
		if !ft.printed {
			ft.printed = true
			emit(Event{Time: ft.born, Event: "born", TID: ft.tid, Name: ft.name, Creator: ft.creator})
		}
	}
	first := true
	scan := func() {
		threads, err := r.List()
		for i := 0; err != nil && i < 3; i++ {
			threads, err = r.List() // torn by a thread being born or dying
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
			if th.TID != 0 {
				// The last native thread it was seen on: a thread being
				// born has none yet, and one dying has let its go.
				ft.tid = th.TID
			}
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
			if full, err := r.Read(&stacks.Selection{Nonblocking: true}); err == nil {
				for _, th := range full.Threads {
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
				emit(Event{Time: now, Event: "exited", TID: ft.tid, Name: ft.name, Creator: ft.creator, Lifetime: now.Sub(ft.born).Seconds()})
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
				if tk, err := procfs.ReadTask(pid, tid); err == nil {
					comm = tk.Comm
				}
				emit(Event{Time: at, Event: "native-born", TID: tid, Name: comm})
			}
		}
	}
	// flush reads the threads a last time and prints every birth not yet
	// printed.
	flush := func() {
		scan()
		for _, ft := range ruby {
			if ft.tid != 0 { // never on a native thread: half-made, dropped
				printBirth(ft)
			}
		}
	}
	scan()
	tick := time.NewTicker(RubyPollInterval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-native:
			if !ok {
				flush()
				return ctx.Err() == nil
			}
			scan()
			if everRuby[ev.TID] {
				continue // reported as a Ruby thread
			}
			switch ev.Kind {
			case Born:
				nativePending[ev.TID] = ev.Time
			case Exited:
				if _, ok := nativePending[ev.TID]; ok {
					delete(nativePending, ev.TID)
					emit(Event{Time: ev.Time, Event: "native-born", TID: ev.TID})
					nativeBorn[ev.TID] = ev.Time
				}
				out := Event{Time: ev.Time, Event: "native-exited", TID: ev.TID}
				if b, ok := nativeBorn[ev.TID]; ok {
					out.Lifetime = ev.Time.Sub(b).Seconds()
					delete(nativeBorn, ev.TID)
				}
				emit(out)
			}
		case <-tick.C:
			scan()
		case <-ctx.Done():
			// Stopping: the births seen but not yet printed (waiting for a
			// name) are printed, as when native closes, which this case
			// may win the race against.
			flush()
			return false
		}
	}
}
