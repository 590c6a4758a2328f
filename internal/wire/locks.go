package wire

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
)

// Wait is what a Ruby thread is blocked on: a Mutex, a Monitor, a
// ConditionVariable, a Queue or another thread's end (kind).
type Wait struct {
	// Text is the line the text outputs print.
	Text   string     `json:"text"`
	Kind   string     `json:"kind"`
	Object SyncObject `json:"object"`
	// Mutex is a Monitor's Mutex, or the Mutex a ConditionVariable's
	// waiter takes again; Monitor the Monitor a MonitorMixin condition
	// waits in.
	Mutex   *SyncObject `json:"mutex,omitempty"`
	Monitor *SyncObject `json:"monitor,omitempty"`
	// Owner holds the Mutex waited for, or is the thread joined;
	// OwnerKnown is false when the owner did not check out (Owner is then
	// absent); true with no Owner when none holds it.
	Owner      *ThreadRef  `json:"owner,omitempty"`
	OwnerKnown bool        `json:"owner_known"`
	Waiters    []ThreadRef `json:"waiters,omitempty"`
	Queue      *QueueState `json:"queue,omitempty"`
}

// SyncObject is a synchronisation object: its class and its address as
// Ruby's inspect prints it ("0x000055d0c1a2b3c8"), or, for a Mutex known
// only from its holder's list, its rb_mutex_t (data).
type SyncObject struct {
	Class   string `json:"class"`
	Address string `json:"address,omitempty"`
	Data    string `json:"data,omitempty"`
}

// ThreadRef names another Ruby thread of the document: its place in the
// document's threads, its TID and name.
type ThreadRef struct {
	Index int    `json:"index"`
	TID   int    `json:"tid"`
	Name  string `json:"name"`
}

// QueueState is a Queue's length and its waiting poppers; max and
// waiting_push are a SizedQueue's.
type QueueState struct {
	Length      int64  `json:"length"`
	Waiting     int64  `json:"waiting"`
	Max         *int64 `json:"max,omitempty"`
	WaitingPush *int64 `json:"waiting_push,omitempty"`
}

// HeldLock is a Mutex a thread holds (a Monitor's, with the Monitor,
// where known) and the threads waiting for it.
type HeldLock struct {
	// Text is the line the text outputs print.
	Text    string      `json:"text"`
	Mutex   SyncObject  `json:"mutex"`
	Monitor *SyncObject `json:"monitor,omitempty"`
	Waiters []ThreadRef `json:"waiters,omitempty"`
}

// Deadlock is a cycle of waits: each thread waits for what the next
// holds, the last for the first; text is the line the text output prints.
type Deadlock struct {
	Text    string         `json:"text"`
	Threads []DeadlockLink `json:"threads"`
}

// DeadlockLink is one thread of a cycle and what it waits for.
type DeadlockLink struct {
	ThreadRef
	WaitsFor SyncObject `json:"waits_for"`
}

func syncObject(o rubyvm.SyncObject) SyncObject {
	s := SyncObject{Class: o.Class}
	if o.Addr != 0 {
		s.Address = fmt.Sprintf("0x%016x", o.Addr)
	}
	if o.Data != 0 {
		s.Data = fmt.Sprintf("%#x", o.Data)
	}
	return s
}

func syncObjectPtr(o *rubyvm.SyncObject) *SyncObject {
	if o == nil {
		return nil
	}
	s := syncObject(*o)
	return &s
}

func threadRefs(rs []stacks.ThreadRef) []ThreadRef {
	var out []ThreadRef
	for _, r := range rs {
		out = append(out, ThreadRef(r))
	}
	return out
}

// newWait maps a thread's wait to its document.
func newWait(w *stacks.Wait) *Wait {
	if w == nil {
		return nil
	}
	d := &Wait{Text: w.String(), Kind: string(w.Kind), Object: syncObject(w.Object), Mutex: syncObjectPtr(w.Mutex), Monitor: syncObjectPtr(w.Monitor),
		OwnerKnown: w.OwnerKnown, Waiters: threadRefs(w.Waiters)}
	if w.Owner != nil {
		r := ThreadRef(*w.Owner)
		d.Owner = &r
	}
	if q := w.Queue; q != nil {
		d.Queue = &QueueState{Length: q.Length, Waiting: q.Waiting}
		if q.Max >= 0 {
			d.Queue.Max, d.Queue.WaitingPush = &q.Max, &q.WaitingPush
		}
	}
	return d
}

// newHeld maps a thread's held Mutexes to documents.
func newHeld(hs []stacks.Held) []HeldLock {
	var out []HeldLock
	for _, h := range hs {
		out = append(out, HeldLock{Text: h.String(), Mutex: syncObject(h.Mutex), Monitor: syncObjectPtr(h.Monitor), Waiters: threadRefs(h.Waiters)})
	}
	return out
}

// Deadlocks maps the cycles of the threads' waits (stacks.Deadlocks) to
// documents.
func Deadlocks(threads []stacks.Thread) []Deadlock {
	var out []Deadlock
	for _, d := range stacks.Deadlocks(threads) {
		out = append(out, newDeadlock(d))
	}
	return out
}

// newDeadlock maps a cycle of waits.
func newDeadlock(d stacks.Deadlock) Deadlock {
	doc := Deadlock{Text: d.String()}
	for _, l := range d {
		doc.Threads = append(doc.Threads, DeadlockLink{ThreadRef: ThreadRef(l.Thread), WaitsFor: syncObject(l.Wait.Object)})
	}
	return doc
}

// object reads a SyncObject back.
func (s SyncObject) object() rubyvm.SyncObject {
	return rubyvm.SyncObject{Class: s.Class, Addr: unhex(s.Address), Data: unhex(s.Data)}
}

func (s *SyncObject) objectPtr() *rubyvm.SyncObject {
	if s == nil {
		return nil
	}
	o := s.object()
	return &o
}

func stackRefs(rs []ThreadRef) []stacks.ThreadRef {
	var out []stacks.ThreadRef
	for _, r := range rs {
		out = append(out, stacks.ThreadRef(r))
	}
	return out
}

// wait reads a Wait back (a stored crash report's).
func (w *Wait) wait() *stacks.Wait {
	if w == nil {
		return nil
	}
	s := &stacks.Wait{Kind: rubyvm.WaitKind(w.Kind), Object: w.Object.object(), Mutex: w.Mutex.objectPtr(), Monitor: w.Monitor.objectPtr(),
		OwnerKnown: w.OwnerKnown, Waiters: stackRefs(w.Waiters)}
	if w.Owner != nil {
		r := stacks.ThreadRef(*w.Owner)
		s.Owner = &r
	}
	if q := w.Queue; q != nil {
		s.Queue = &rubyvm.QueueState{Length: q.Length, Waiting: q.Waiting, Max: -1, WaitingPush: -1}
		if q.Max != nil && q.WaitingPush != nil {
			s.Queue.Max, s.Queue.WaitingPush = *q.Max, *q.WaitingPush
		}
	}
	return s
}

// held reads held Mutexes back.
func held(hs []HeldLock) []stacks.Held {
	var out []stacks.Held
	for _, h := range hs {
		out = append(out, stacks.Held{Mutex: h.Mutex.object(), Monitor: h.Monitor.objectPtr(), Waiters: stackRefs(h.Waiters)})
	}
	return out
}
