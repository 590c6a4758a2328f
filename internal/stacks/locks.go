package stacks

import (
	"fmt"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm"
)

// ThreadRef names another thread of the same capture: its index in the
// capture's list, its TID and its name.
type ThreadRef struct {
	Index int
	TID   int
	Name  string
}

// Wait is what a Ruby thread is blocked on (rubyvm.Wait), its owner and
// the other threads waiting on the same object named.
type Wait struct {
	Kind rubyvm.WaitKind
	// Object is what the thread waits on; Mutex and Monitor as in
	// rubyvm.Wait.
	Object  rubyvm.SyncObject
	Mutex   *rubyvm.SyncObject
	Monitor *rubyvm.SyncObject
	// Owner holds the Mutex waited for, or is the thread joined; nil when
	// none holds it or the owner did not check out (OwnerKnown false).
	Owner      *ThreadRef
	OwnerKnown bool
	// Waiters are the other threads waiting on Object, in the VM's order.
	Waiters []ThreadRef
	// Queue is a queue wait's Queue as it stood.
	Queue *rubyvm.QueueState
}

// Held is a Mutex a thread holds (a Monitor's, with the Monitor, where
// known) and the threads waiting for it.
type Held struct {
	Mutex   rubyvm.SyncObject
	Monitor *rubyvm.SyncObject
	Waiters []ThreadRef
}

// refOf names thread i of ths ("main" for the unnamed main thread).
func refOf(ths []Thread, i int) ThreadRef {
	name := ths[i].Name
	if name == "" && ths[i].Main {
		name = "main"
	}
	return ThreadRef{Index: i, TID: ths[i].TID, Name: name}
}

// joinLocks gives the Ruby threads out (the capture's, in ruby's order)
// what locks says each waits on and holds, naming owners and waiters by
// their place in out.
func joinLocks(out []Thread, ruby []rubyvm.Thread, locks []rubyvm.Locks) {
	if len(locks) != len(ruby) {
		return
	}
	byAddr := map[uint64]int{}
	for i, rt := range ruby {
		byAddr[rt.Addr] = i
	}
	ref := func(i int) ThreadRef { return refOf(out, i) }
	waiters := map[uint64][]ThreadRef{} // by the object's VALUE (or a Mutex's data)
	key := func(o rubyvm.SyncObject) uint64 {
		if o.Addr != 0 {
			return o.Addr
		}
		return o.Data
	}
	for i, l := range locks {
		if w := l.Wait; w != nil {
			waiters[key(w.Object)] = append(waiters[key(w.Object)], ref(i))
			if w.Mutex != nil && w.Kind == rubyvm.WaitMonitor {
				waiters[key(*w.Mutex)] = append(waiters[key(*w.Mutex)], ref(i))
			}
		}
	}
	others := func(k uint64, self int) []ThreadRef {
		var o []ThreadRef
		for _, r := range waiters[k] {
			if r.Index != self {
				o = append(o, r)
			}
		}
		return o
	}
	for i, l := range locks {
		if w := l.Wait; w != nil {
			sw := &Wait{Kind: w.Kind, Object: w.Object, Mutex: w.Mutex, Monitor: w.Monitor, OwnerKnown: w.OwnerKnown, Queue: w.Queue,
				Waiters: others(key(w.Object), i)}
			if o, ok := byAddr[w.Owner]; ok && w.OwnerKnown && w.Owner != 0 {
				r := ref(o)
				sw.Owner = &r
			}
			out[i].Wait = sw
		}
		for _, h := range l.Held {
			out[i].Held = append(out[i].Held, Held{Mutex: h.Mutex, Monitor: h.Monitor, Waiters: others(key(h.Mutex), i)})
		}
	}
}

// Deadlock is a cycle of waits: each thread waits for what the next one
// holds (a Mutex, a Monitor) or for the next one to end (a join), the
// last for the first.
type Deadlock []DeadlockLink

// DeadlockLink is one thread of a cycle and its wait.
type DeadlockLink struct {
	Thread ThreadRef
	Wait   *Wait
}

// Deadlocks finds the cycles of the threads' waits, each once, starting
// from its thread first in ths.
func Deadlocks(ths []Thread) []Deadlock {
	next := func(i int) int {
		if i < 0 || i >= len(ths) {
			return -1
		}
		w := ths[i].Wait
		if w == nil || w.Owner == nil {
			return -1
		}
		switch w.Kind {
		case rubyvm.WaitMutex, rubyvm.WaitMonitor, rubyvm.WaitJoin:
			return w.Owner.Index
		}
		return -1
	}
	var out []Deadlock
	seen := make([]bool, len(ths))
	for start := range ths {
		// Follow the waits from start; a cycle is found when the walk
		// comes back to a thread of this walk.
		on := map[int]int{} // thread -> its place in path
		var path []int
		i := start
		for i >= 0 && !seen[i] {
			if at, ok := on[i]; ok {
				cycle := path[at:]
				first := 0
				for k, c := range cycle {
					if c < cycle[first] {
						first = k
					}
				}
				var d Deadlock
				for k := range cycle {
					c := cycle[(first+k)%len(cycle)]
					d = append(d, DeadlockLink{Thread: refOf(ths, c), Wait: ths[c].Wait})
				}
				out = append(out, d)
				break
			}
			on[i] = len(path)
			path = append(path, i)
			i = next(i)
		}
		for _, p := range path {
			seen[p] = true
		}
	}
	return out
}

// String names the thread as the lock lines do: "worker-1" tid=1234
// (tid=none for an M:N thread on no native thread now).
func (r ThreadRef) String() string {
	if r.TID == 0 {
		return fmt.Sprintf("%q tid=none", r.Name)
	}
	return fmt.Sprintf("%q tid=%d", r.Name, r.TID)
}

// ObjectString names a synchronisation object as Ruby's inspect does:
// its class and VALUE, or a Mutex known only from its holder's list by
// its rb_mutex_t.
func ObjectString(o rubyvm.SyncObject) string {
	if o.Addr == 0 {
		return fmt.Sprintf("%s (rb_mutex_t %#x)", o.Class, o.Data)
	}
	return fmt.Sprintf("%s 0x%016x", o.Class, o.Addr)
}

// refs lists threads for a line.
func refs(rs []ThreadRef) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// what names what w waits for: the object, with a Monitor's Mutex.
func (w *Wait) what() string {
	if w.Kind == rubyvm.WaitMonitor && w.Mutex != nil {
		return fmt.Sprintf("%s (its %s)", ObjectString(w.Object), ObjectString(*w.Mutex))
	}
	return ObjectString(w.Object)
}

// owner says who holds what w waits for.
func (w *Wait) owner() string {
	switch {
	case w.Owner != nil:
		return "held by " + w.Owner.String()
	case w.OwnerKnown:
		return "held by none (being handed over)"
	}
	return "its owner not read"
}

// String says in one line what the thread waits on.
func (w *Wait) String() string {
	var s string
	switch w.Kind {
	case rubyvm.WaitMutex, rubyvm.WaitMonitor:
		s = fmt.Sprintf("waiting for %s %s", w.what(), w.owner())
	case rubyvm.WaitCondVar:
		retake := "?"
		if w.Mutex != nil {
			retake = ObjectString(*w.Mutex)
		}
		if w.Monitor != nil {
			retake = fmt.Sprintf("%s (its %s)", ObjectString(*w.Monitor), retake)
		}
		s = fmt.Sprintf("waiting on %s, to take %s again", ObjectString(w.Object), retake)
		switch {
		case w.Owner != nil:
			s += " (now held by " + w.Owner.String() + ")"
		case w.OwnerKnown:
			s += " (now free)"
		}
	case rubyvm.WaitQueuePop, rubyvm.WaitQueuePush:
		s = fmt.Sprintf("waiting on %s for an item", ObjectString(w.Object))
		if w.Kind == rubyvm.WaitQueuePush {
			s = fmt.Sprintf("waiting on %s for room", ObjectString(w.Object))
		}
		if q := w.Queue; q != nil {
			if q.Max >= 0 {
				s += fmt.Sprintf(": length %d of %d, %d popping and %d pushing waiting", q.Length, q.Max, q.Waiting, q.WaitingPush)
			} else {
				s += fmt.Sprintf(": length %d, %d waiting", q.Length, q.Waiting)
			}
		}
	case rubyvm.WaitJoin:
		s = fmt.Sprintf("waiting for %s to end (join)", ObjectString(w.Object))
		if w.Owner != nil {
			s = fmt.Sprintf("waiting for %s %s to end (join)", ObjectString(w.Object), w.Owner)
		}
	default:
		s = fmt.Sprintf("waiting on %s", ObjectString(w.Object))
	}
	if len(w.Waiters) > 0 {
		s += fmt.Sprintf("; also waiting: %s", refs(w.Waiters))
	}
	return s
}

// String says in one line what a thread holds and who waits for it.
func (h Held) String() string {
	s := "holds " + ObjectString(h.Mutex)
	if h.Monitor != nil {
		s = fmt.Sprintf("holds %s (its %s)", ObjectString(*h.Monitor), ObjectString(h.Mutex))
	}
	if len(h.Waiters) > 0 {
		s += "; waited for by " + refs(h.Waiters)
	}
	return s
}

// LockLines are the lines that say what th waits on and holds, for the
// text outputs (stack, core, threads, crash reports): its wait first.
func LockLines(th Thread) []string {
	var out []string
	if th.Wait != nil {
		out = append(out, th.Wait.String())
	}
	for _, h := range th.Held {
		out = append(out, h.String())
	}
	return out
}

// String is the cycle in one line: deadlock: "a" waits for Thread::Mutex
// 0x... held by "b", which waits for Thread::Mutex 0x... held by "a".
func (d Deadlock) String() string {
	var b strings.Builder
	b.WriteString("deadlock: ")
	for k, l := range d {
		next := d[(k+1)%len(d)].Thread
		if k == 0 {
			fmt.Fprintf(&b, "%q waits ", l.Thread.Name)
		} else {
			b.WriteString(", which waits ")
		}
		if l.Wait.Kind == rubyvm.WaitJoin {
			fmt.Fprintf(&b, "for %q to end (join)", next.Name)
		} else {
			fmt.Fprintf(&b, "for %s held by %q", l.Wait.what(), next.Name)
		}
	}
	return b.String()
}
