package rubyvm

import (
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// WaitKind is what a thread is blocked on.
type WaitKind string

// The waits ReadLocks names.
const (
	// WaitMutex: Mutex#lock or #synchronize, or a Mutex being taken again
	// after a sleep (a ConditionVariable's wait that was signalled).
	WaitMutex WaitKind = "mutex"
	// WaitMonitor: Monitor#enter or #synchronize (MonitorMixin's
	// mon_enter and mon_synchronize), on the Monitor's Mutex.
	WaitMonitor WaitKind = "monitor"
	// WaitCondVar: ConditionVariable#wait (MonitorMixin's new_cond wait
	// too), asleep until signalled, then to take its Mutex again.
	WaitCondVar WaitKind = "condition_variable"
	// WaitQueuePop: Queue#pop or SizedQueue#pop on an empty queue.
	WaitQueuePop WaitKind = "queue_pop"
	// WaitQueuePush: SizedQueue#push on a full queue.
	WaitQueuePush WaitKind = "queue_push"
	// WaitJoin: Thread#join or Thread#value, for the thread to end.
	WaitJoin WaitKind = "join"
)

// SyncObject is a synchronisation object: its class (Module#name, such as
// "Thread::Mutex") and its VALUE (the address Ruby's inspect prints). A
// Mutex known only from its holder's list has Addr 0 and its rb_mutex_t
// in Data.
type SyncObject struct {
	Class string
	Addr  uint64
	Data  uint64
}

// Wait is what one thread is blocked on, as its stack and its thread
// struct show it.
type Wait struct {
	Kind WaitKind
	// Object is what the thread waits on: the Mutex, Monitor,
	// ConditionVariable, Queue or the Thread joined.
	Object SyncObject
	// Mutex is a Monitor's Mutex, or the Mutex a ConditionVariable's
	// waiter takes again when signalled; Monitor is, for a
	// ConditionVariable wait in Monitor#wait_for_cond (MonitorMixin's
	// new_cond), the Monitor retaken.
	Mutex   *SyncObject
	Monitor *SyncObject
	// Owner is the thread (rb_thread_t) that holds the Mutex waited for
	// (WaitMutex, WaitMonitor, and WaitCondVar's Mutex) or the thread
	// joined (WaitJoin); 0 when there is none or it did not check out
	// (OwnerKnown false).
	Owner      uint64
	OwnerKnown bool
	// Queue is a queue wait's Queue as it stood.
	Queue *QueueState
}

// QueueState is a Queue's length and waiters as a read found them; Max
// and WaitingPush are a SizedQueue's (-1 for a Queue).
type QueueState struct {
	Length, Waiting, Max, WaitingPush int64
}

// Locks is what a thread holds and waits on (ReadLocks).
type Locks struct {
	// Wait is what the thread is blocked on; nil when it is not, or when
	// what it waits on did not check out.
	Wait *Wait
	// Held are the Mutexes the thread holds, innermost lock first (a
	// Monitor's with the Monitor, where a waiter named it).
	Held []HeldMutex
}

// HeldMutex is a Mutex a thread holds, and the Monitor it belongs to when
// known.
type HeldMutex struct {
	Mutex   SyncObject
	Monitor *SyncObject
}

// The methods that block, by label.
const (
	labelMutexLock    = "Thread::Mutex#lock"
	labelMutexSync    = "Thread::Mutex#synchronize"
	labelMutexSleep   = "Thread::Mutex#sleep"
	labelMonitorEnter = "Monitor#enter"
	labelMonitorSync  = "Monitor#synchronize"
	labelMonitorWait  = "Monitor#wait_for_cond"
	labelCondVarWait  = "Thread::ConditionVariable#wait"
	labelQueuePop     = "Thread::Queue#pop"
	labelSizedPop     = "Thread::SizedQueue#pop"
	labelSizedPush    = "Thread::SizedQueue#push"
	labelThreadJoin   = "Thread#join"
	labelThreadValue  = "Thread#value"
)

// ReadLocks reads what each thread of ths (as ReadThreads read them, with
// their stacks, while they stand still) waits on and holds, by the
// threads' index. A thread waiting for a Mutex names it in its thread
// struct (locking_mutex); the Mutex's owner is read from it and checked
// against the owner's own list of held Mutexes. Other waits are read from
// the innermost frame: the receiver of the blocking method
// (ConditionVariable#wait and the Mutex#sleep it calls, Queue#pop,
// SizedQueue#push, Thread#join), its class checked. It fails only when
// the layout lacks what it needs (layout.FeatureLocks).
func (v *VM) ReadLocks(ths []Thread) ([]Locks, error) {
	if err := v.Supports(layout.FeatureLocks); err != nil {
		return nil, err
	}
	L := v.Layout
	if !(L.MutexFiber >= 0 && L.FiberThreadPtr >= 0) && L.MutexThread < 0 {
		return nil, unsupported("naming locks and waits is not available for Ruby %s: the layout (%s) has no Mutex owner (rb_mutex_struct.fiber or .th): %w (%w)", v.Version, L.Source, layout.ErrFeatureMissing, ErrUnsupported)
	}
	threads := make(map[uint64]bool, len(ths))
	for _, t := range ths {
		threads[t.Addr] = true
	}
	out := make([]Locks, len(ths))
	// The Mutexes seen by VALUE, by their rb_mutex_t, to name held ones;
	// the Monitor each belongs to, where a waiter showed it.
	values := map[uint64]uint64{}
	monitors := map[uint64]SyncObject{}
	mutex := func(obj uint64) (SyncObject, bool) {
		class, data, err := v.syncData(obj, ClassMutex)
		if err != nil {
			return SyncObject{}, false
		}
		values[data] = obj
		return SyncObject{Class: class, Addr: obj, Data: data}, true
	}
	// The threads in each queue's pop and push, asleep and at all: a
	// queue's count of its waiters lies between the two.
	queued := map[queueWaiter]int{}
	for _, t := range ths {
		if fw, ok := frameWait(t); ok && (fw.Kind == WaitQueuePop || fw.Kind == WaitQueuePush) {
			queued[queueWaiter{fw.Object, fw.Kind, false}]++
			if t.Status == "sleep" {
				queued[queueWaiter{fw.Object, fw.Kind, true}]++
			}
		}
	}
	for i, t := range ths {
		if t.Status == "dead" || t.Error != "" {
			continue
		}
		for _, f := range t.Frames {
			if f.Label == labelMutexSync || f.Label == labelMutexLock || f.Label == labelMutexSleep {
				mutex(f.Self)
			}
		}
		w := v.wait(t, mutex, threads, queued)
		if w == nil {
			continue
		}
		if w.Mutex != nil {
			if m := w.Monitor; m != nil {
				monitors[w.Mutex.Addr] = *m
			} else if w.Kind == WaitMonitor {
				monitors[w.Mutex.Addr] = w.Object
			}
		}
		out[i].Wait = w
	}
	for i, t := range ths {
		if t.Status == "dead" || t.Error != "" {
			continue
		}
		held, err := v.heldMutexes(t.Addr)
		if err != nil {
			continue
		}
		for _, data := range held {
			if owner, err := v.mutexOwner(data, threads); err != nil || owner != t.Addr {
				out[i].Held = nil // a list that does not check out names nothing
				break
			}
			h := HeldMutex{Mutex: SyncObject{Class: ClassMutex, Addr: values[data], Data: data}}
			if m, ok := monitors[values[data]]; ok && values[data] != 0 {
				h.Monitor = &m
			}
			out[i].Held = append(out[i].Held, h)
		}
	}
	return out, nil
}

// FrameWait is what a sleeping thread's innermost frames say it blocks
// on, from its stack alone (no memory is read, nothing is checked): the
// kind, the class of the object by the method it is blocked in, and the
// receivers of those frames (Object; a ConditionVariable wait's Mutex,
// and the Monitor of Monitor#wait_for_cond). A sampler names a wait by it;
// ReadLocks checks it.
type FrameWait struct {
	Kind    WaitKind
	Class   string
	Object  uint64
	Mutex   uint64
	Monitor uint64
}

// FrameWaitOf returns what thread t's innermost frames say it is blocked
// on, and false when they name no wait (or t is not asleep).
func FrameWaitOf(t Thread) (FrameWait, bool) {
	if t.Status != "sleep" {
		return FrameWait{}, false
	}
	return frameWait(t)
}

// frameWait is FrameWaitOf whatever the thread's status: a thread woken
// from its wait, not yet out of the blocking method, is still in it.
func frameWait(t Thread) (FrameWait, bool) {
	if len(t.Frames) == 0 {
		return FrameWait{}, false
	}
	label := func(i int) string {
		if i < len(t.Frames) {
			return t.Frames[i].Label
		}
		return ""
	}
	self := t.Frames[0].Self
	switch label(0) {
	case labelMutexLock, labelMutexSync:
		return FrameWait{Kind: WaitMutex, Class: ClassMutex, Object: self}, true
	case labelMonitorEnter, labelMonitorSync:
		return FrameWait{Kind: WaitMonitor, Class: ClassMonitor, Object: self}, true
	case labelMutexSleep:
		if label(1) != labelCondVarWait {
			return FrameWait{}, false // Mutex#sleep alone waits for no object
		}
		w := FrameWait{Kind: WaitCondVar, Class: ClassCondVar, Object: t.Frames[1].Self, Mutex: self}
		if label(2) == labelMonitorWait {
			w.Monitor = t.Frames[2].Self
		}
		return w, true
	case labelQueuePop:
		return FrameWait{Kind: WaitQueuePop, Class: ClassQueue, Object: self}, true
	case labelSizedPop:
		return FrameWait{Kind: WaitQueuePop, Class: ClassSizedQueue, Object: self}, true
	case labelSizedPush:
		return FrameWait{Kind: WaitQueuePush, Class: ClassSizedQueue, Object: self}, true
	case labelThreadJoin, labelThreadValue:
		return FrameWait{Kind: WaitJoin, Class: ClassThread, Object: self}, true
	}
	return FrameWait{}, false
}

// queueWaiter counts the threads in a queue's pop or push (kind), asleep
// or at all.
type queueWaiter struct {
	queue  uint64
	kind   WaitKind
	asleep bool
}

// wait reads what thread t is blocked on; nil when nothing checks out.
// mutex decodes and notes a Mutex; queued counts the threads in each
// queue's pop and push, which its own counts must agree with.
func (v *VM) wait(t Thread, mutex func(uint64) (SyncObject, bool), threads map[uint64]bool, queued map[queueWaiter]int) *Wait {
	L := v.Layout
	owned := func(w *Wait, m SyncObject) *Wait {
		owner, err := v.mutexOwner(m.Data, threads)
		w.Owner, w.OwnerKnown = owner, err == nil
		return w
	}
	fw, framed := FrameWaitOf(t)
	locking, err := v.m.u64(at(t.Addr, L.ThreadLockingMutex))
	if err == nil && v.IsHeapObject(locking) {
		m, ok := mutex(locking)
		if !ok {
			return nil
		}
		w := &Wait{Kind: WaitMutex, Object: m}
		if framed && fw.Kind == WaitMonitor {
			if class, _, err := v.syncData(fw.Object, ClassMonitor); err == nil {
				w = &Wait{Kind: WaitMonitor, Object: SyncObject{Class: class, Addr: fw.Object}, Mutex: &m}
			}
		}
		return owned(w, m)
	}
	if !framed {
		return nil
	}
	switch fw.Kind {
	case WaitCondVar:
		m, ok := mutex(fw.Mutex)
		class, _, err := v.syncData(fw.Object, ClassCondVar)
		if !ok || err != nil {
			return nil
		}
		w := &Wait{Kind: WaitCondVar, Object: SyncObject{Class: class, Addr: fw.Object}, Mutex: &m}
		if fw.Monitor != 0 {
			if class, _, err := v.syncData(fw.Monitor, ClassMonitor); err == nil {
				w.Monitor = &SyncObject{Class: class, Addr: fw.Monitor}
			}
		}
		return owned(w, m)
	case WaitQueuePop, WaitQueuePush:
		// A SizedQueue pops through Queue#pop where it does not define
		// its own.
		class, data, err := v.syncData(fw.Object, ClassQueue, ClassSizedQueue)
		if err != nil {
			return nil
		}
		w := &Wait{Kind: fw.Kind, Object: SyncObject{Class: class, Addr: fw.Object}}
		q, err := v.queue(data, class == ClassSizedQueue)
		within := func(n int64, kind WaitKind) bool {
			return int64(queued[queueWaiter{fw.Object, kind, true}]) <= n && n <= int64(queued[queueWaiter{fw.Object, kind, false}])
		}
		if err == nil && within(q.waiting, WaitQueuePop) && (q.max < 0 || within(q.waitingPush, WaitQueuePush)) {
			w.Queue = &QueueState{Length: q.length, Waiting: q.waiting, Max: q.max, WaitingPush: q.waitingPush}
		}
		return w
	case WaitJoin:
		class, data, err := v.syncData(fw.Object, ClassThread)
		if err != nil || !threads[data] || data == t.Addr {
			return nil
		}
		return &Wait{Kind: WaitJoin, Object: SyncObject{Class: class, Addr: fw.Object}, Owner: data, OwnerKnown: true}
	}
	return nil // a Mutex or Monitor frame without a Mutex being waited for
}
