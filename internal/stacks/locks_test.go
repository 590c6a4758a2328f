package stacks

import (
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
)

func TestDeadlocks(t *testing.T) {
	mutex := func(addr uint64) rubyvm.SyncObject { return rubyvm.SyncObject{Class: "Thread::Mutex", Addr: addr} }
	waitFor := func(kind rubyvm.WaitKind, obj rubyvm.SyncObject, owner int, ths []Thread) *Wait {
		r := ThreadRef{Index: owner, TID: ths[owner].TID, Name: ths[owner].Name}
		return &Wait{Kind: kind, Object: obj, Owner: &r, OwnerKnown: true}
	}
	ths := []Thread{{Name: "", Main: true, TID: 1}, {Name: "a", TID: 2}, {Name: "b", TID: 3}, {Name: "c", TID: 4}, {Name: "d", TID: 5}, {Name: "e", TID: 6}}
	// a -> b -> c -> a (Mutexes), d waits for a (not in the cycle), e joins
	// main, which waits on nothing.
	ths[1].Wait = waitFor(rubyvm.WaitMutex, mutex(0x10), 2, ths)
	ths[2].Wait = waitFor(rubyvm.WaitMonitor, rubyvm.SyncObject{Class: "Monitor", Addr: 0x20}, 3, ths)
	ths[3].Wait = waitFor(rubyvm.WaitJoin, rubyvm.SyncObject{Class: "Thread", Addr: 0x30}, 1, ths)
	ths[4].Wait = waitFor(rubyvm.WaitMutex, mutex(0x40), 1, ths)
	ths[5].Wait = waitFor(rubyvm.WaitJoin, rubyvm.SyncObject{Class: "Thread", Addr: 0x50}, 0, ths)
	ds := Deadlocks(ths)
	if len(ds) != 1 || len(ds[0]) != 3 || ds[0][0].Thread.Name != "a" {
		t.Fatalf("deadlocks %+v, want a -> b -> c", ds)
	}
	want := `deadlock: "a" waits for Thread::Mutex 0x0000000000000010 held by "b", which waits for Monitor 0x0000000000000020 held by "c", which waits for "a" to end (join)`
	if got := ds[0].String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// A queue wait or a wait whose owner is unknown makes no cycle.
	ths[3].Wait = &Wait{Kind: rubyvm.WaitQueuePop, Object: rubyvm.SyncObject{Class: "Thread::Queue", Addr: 0x60}}
	if ds := Deadlocks(ths); len(ds) != 0 {
		t.Errorf("deadlocks %+v, want none", ds)
	}
	// Two threads that each wait for the other's Mutex, named from the
	// main thread's point of view: the cycle starts at its first thread.
	ths = []Thread{{Name: "x", TID: 1}, {Name: "y", TID: 2}}
	ths[1].Wait = waitFor(rubyvm.WaitMutex, mutex(0x1), 0, ths)
	ths[0].Wait = waitFor(rubyvm.WaitMutex, mutex(0x2), 1, ths)
	if ds := Deadlocks(ths); len(ds) != 1 || ds[0][0].Thread.Name != "x" || ds[0][1].Thread.Name != "y" {
		t.Errorf("deadlocks %+v, want x -> y", ds)
	}
}
