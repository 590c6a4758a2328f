package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// locksReport is what testdata/locks.rb says of itself.
type locksReport struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Threads map[string]struct {
		TID    int    `json:"tid"`
		Status string `json:"status"`
		Addr   uint64 `json:"addr"`
	} `json:"threads"`
	Lock, A, B, Monitor, Cond, Queue, Sized uint64
	// Owned is what each holder's Mutex#owned? (Monitor#mon_owned?) said.
	Owned        map[string]bool `json:"owned"`
	LockLocked   bool            `json:"lock_locked"`
	ALocked      bool            `json:"a_locked"`
	BLocked      bool            `json:"b_locked"`
	QueueLength  int64           `json:"queue_length"`
	QueueWaiting int64           `json:"queue_waiting"`
	SizedLength  int64           `json:"sized_length"`
	SizedMax     int64           `json:"sized_max"`
	SizedWaiting int64           `json:"sized_waiting"`
}

// startLocks runs testdata/locks.rb on rb and waits for its report.
func startLocks(t *testing.T, rb testruby.Ruby) (*testruby.Process, locksReport) {
	t.Helper()
	p := testruby.Start(t, rb, "locks.rb", nil)
	var rep locksReport
	p.WaitReport(t, &rep, 60*time.Second)
	if !rep.LockLocked || !rep.ALocked || !rep.BLocked || len(rep.Owned) != 4 {
		t.Fatalf("the program's locks are not all held: %+v", rep)
	}
	for name, owned := range rep.Owned {
		if !owned {
			t.Fatalf("%s does not own its lock, says Mutex#owned?", name)
		}
	}
	return p, rep
}

// stackJSON runs stack --json on process pid.
func stackJSON(t *testing.T, pid string) wire.Stack {
	t.Helper()
	out, stderr, code := rbscope(t, "stack", "--json", "-p", pid)
	if code != 0 {
		t.Fatalf("stack --json: exit %d: %s", code, stderr)
	}
	var doc wire.Stack
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stack --json: %v\n%s", err, out)
	}
	return doc
}

func hexAddr(a uint64) string { return fmt.Sprintf("0x%016x", a) }

// checkLocks compares what a stack document names of each thread's waits
// and holds with what locks.rb knows of itself.
func checkLocks(t *testing.T, rep locksReport, doc wire.Stack, mn bool) {
	t.Helper()
	// sameTID: under M:N threads a thread asleep is on no native thread
	// (tid 0 in rbscope's books).
	sameTID := func(got, want int) bool { return got == want || mn && got == 0 }
	byName := map[string]wire.Thread{}
	for _, th := range doc.Threads {
		byName[th.Name] = th
	}
	tid := func(name string) int { return rep.Threads[name].TID }
	for name, want := range rep.Threads {
		th, ok := byName[name]
		if !ok {
			t.Errorf("no thread %q in %+v", name, doc.Threads)
			continue
		}
		if th.Status != want.Status || !sameTID(th.TID, want.TID) {
			t.Errorf("thread %q: status %q tid %d, the program says %q %d", name, th.Status, th.TID, want.Status, want.TID)
		}
	}
	names := func(rs []wire.ThreadRef) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
			if !sameTID(r.TID, tid(r.Name)) {
				t.Errorf("waiter %q: tid %d, the program says %d", r.Name, r.TID, tid(r.Name))
			}
		}
		slices.Sort(out)
		return out
	}
	wait := func(name, kind string, object uint64, owner string, waiters ...string) *wire.Wait {
		t.Helper()
		w := byName[name].Wait
		if w == nil {
			t.Errorf("thread %q: no wait named, want %s on %s", name, kind, hexAddr(object))
			return nil
		}
		if w.Kind != kind || w.Object.Address != hexAddr(object) {
			t.Errorf("thread %q: waits (%s) on %s %s, want (%s) on %s", name, w.Kind, w.Object.Class, w.Object.Address, kind, hexAddr(object))
		}
		switch {
		case owner == "" && w.Owner != nil:
			t.Errorf("thread %q: owner %+v, want none", name, *w.Owner)
		case owner != "" && (w.Owner == nil || w.Owner.Name != owner || !sameTID(w.Owner.TID, tid(owner))):
			t.Errorf("thread %q: owner %+v, want %q tid %d", name, w.Owner, owner, tid(owner))
		}
		if got := names(w.Waiters); !slices.Equal(got, waiters) {
			t.Errorf("thread %q: other waiters %q, want %q", name, got, waiters)
		}
		return w
	}
	holds := func(name string, mutex, monitor uint64, waiters ...string) {
		t.Helper()
		for _, h := range byName[name].Holds {
			if mutex != 0 && h.Mutex.Address != hexAddr(mutex) || monitor != 0 && (h.Monitor == nil || h.Monitor.Address != hexAddr(monitor)) {
				continue
			}
			if got := names(h.Waiters); !slices.Equal(got, waiters) {
				t.Errorf("thread %q: the lock it holds has waiters %q, want %q", name, got, waiters)
			}
			return
		}
		t.Errorf("thread %q: holds %+v, want Mutex %s / Monitor %s (Mutex#owned? says so)", name, byName[name].Holds, hexAddr(mutex), hexAddr(monitor))
	}
	wait("waiter-1", "mutex", rep.Lock, "holder", "waiter-2")
	wait("waiter-2", "mutex", rep.Lock, "holder", "waiter-1")
	holds("holder", rep.Lock, 0, "waiter-1", "waiter-2")
	wait("dl-a", "mutex", rep.B, "dl-b")
	wait("dl-b", "mutex", rep.A, "dl-a")
	holds("dl-a", rep.A, 0, "dl-b")
	holds("dl-b", rep.B, 0, "dl-a")
	if w := wait("pool-cond", "condition_variable", rep.Cond, "pool-holder"); w != nil && (w.Monitor == nil || w.Monitor.Address != hexAddr(rep.Monitor)) {
		t.Errorf("pool-cond: retakes monitor %+v, want %s", w.Monitor, hexAddr(rep.Monitor))
	}
	wait("pool-enter", "monitor", rep.Monitor, "pool-holder")
	holds("pool-holder", 0, rep.Monitor, "pool-enter")
	if w := wait("consumer", "queue_pop", rep.Queue, ""); w != nil && (w.Queue == nil || w.Queue.Length != rep.QueueLength || w.Queue.Waiting != rep.QueueWaiting) {
		t.Errorf("consumer: queue %+v, the program says length %d, %d waiting", w.Queue, rep.QueueLength, rep.QueueWaiting)
	}
	if w := wait("producer", "queue_push", rep.Sized, ""); w != nil && (w.Queue == nil || w.Queue.Length != rep.SizedLength ||
		w.Queue.Max == nil || *w.Queue.Max != rep.SizedMax || w.Queue.WaitingPush == nil || *w.Queue.WaitingPush+w.Queue.Waiting != rep.SizedWaiting) {
		t.Errorf("producer: queue %+v, the program says length %d of %d, %d waiting", w.Queue, rep.SizedLength, rep.SizedMax, rep.SizedWaiting)
	}
	wait("joiner", "join", rep.Threads["target"].Addr, "target", "valuer")
	wait("valuer", "join", rep.Threads["target"].Addr, "target", "joiner")
	for _, name := range []string{"holder", "target", "pool-holder"} {
		if w := byName[name].Wait; w != nil {
			t.Errorf("thread %q waits on nothing, rbscope says %+v", name, *w)
		}
	}
	if len(doc.Deadlocks) != 1 {
		t.Fatalf("deadlocks %+v, want the one of dl-a and dl-b", doc.Deadlocks)
	}
	d := doc.Deadlocks[0]
	want := fmt.Sprintf(`deadlock: "dl-a" waits for Thread::Mutex %s held by "dl-b", which waits for Thread::Mutex %s held by "dl-a"`, hexAddr(rep.B), hexAddr(rep.A))
	if d.Text != want || len(d.Threads) != 2 || d.Threads[0].Name != "dl-a" || d.Threads[1].Name != "dl-b" {
		t.Errorf("deadlock %+v, want %q", d, want)
	}
}

// TestLocks: stack (JSON and text), threads, record --idle and core name what each thread of
// testdata/locks.rb waits on and holds, the owners, the other waiters and
// the deadlock, as the program knows them (Mutex#owned?, Thread#status,
// Queue#length and #num_waiting, inspect's addresses), on every Ruby.
func TestLocks(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p, rep := startLocks(t, rb)
			pid := fmt.Sprint(p.PID())
			doc := stackJSON(t, pid)
			checkLocks(t, rep, doc, false)

			text, stderr, code := rbscope(t, "stack", "-p", pid)
			if code != 0 {
				t.Fatalf("stack: exit %d: %s", code, stderr)
			}
			for _, want := range []string{
				fmt.Sprintf(`  - waiting for Thread::Mutex %s held by "holder" tid=%d; also waiting: "waiter-2" tid=%d`, hexAddr(rep.Lock), rep.Threads["holder"].TID, rep.Threads["waiter-2"].TID),
				fmt.Sprintf(`  - holds Thread::Mutex %s; waited for by "waiter-1" tid=%d, "waiter-2" tid=%d`, hexAddr(rep.Lock), rep.Threads["waiter-1"].TID, rep.Threads["waiter-2"].TID),
				fmt.Sprintf(`  - waiting on Thread::Queue %s for an item: length 0, 1 waiting`, hexAddr(rep.Queue)),
				fmt.Sprintf(`deadlock: "dl-a" waits for Thread::Mutex %s held by "dl-b", which waits for Thread::Mutex %s held by "dl-a"`, hexAddr(rep.B), hexAddr(rep.A)),
			} {
				if !strings.Contains(text, want+"\n") {
					t.Errorf("stack's text lacks %q:\n%s", want, text)
				}
			}

			out, stderr, code := rbscope(t, "threads", "--json", "-p", pid)
			if code != 0 {
				t.Fatalf("threads --json: exit %d: %s", code, stderr)
			}
			var table wire.ThreadTable
			if err := json.Unmarshal([]byte(out), &table); err != nil {
				t.Fatalf("threads --json: %v\n%s", err, out)
			}
			tdoc := wire.Stack{Deadlocks: table.Deadlocks}
			for _, r := range table.Threads {
				if r.Ruby != nil {
					tdoc.Threads = append(tdoc.Threads, wire.Thread{TID: r.TID, Name: r.Ruby.Name, Status: r.Ruby.Status, Wait: r.Ruby.Wait, Holds: r.Ruby.Holds})
				}
			}
			checkLocks(t, rep, tdoc, false)

			// record --idle ends each blocked thread's samples in its
			// wait's leaf, by class; a thread asleep in Kernel#sleep
			// gets none.
			out, stderr, code = rbscope(t, "record", "-p", pid, "--idle", "--duration", "0.5", "--format", "collapsed", "-o", "-")
			if code != 0 {
				t.Fatalf("record --idle: exit %d: %s", code, stderr)
			}
			for _, leaf := range []string{"(waiting for Thread::Mutex)", "(waiting for Monitor)", "(waiting on Thread::ConditionVariable)",
				"(waiting on Thread::Queue)", "(waiting on Thread::SizedQueue)", "(waiting for a Thread to end)"} {
				if !strings.Contains(out, ";"+leaf+" ") {
					t.Errorf("record --idle: no stack ends in %s:\n%s", leaf, out)
				}
			}
			if strings.Contains(out, "Kernel#sleep (cfunc);(waiting") {
				t.Errorf("record --idle: a sleeping thread got a wait's leaf:\n%s", out)
			}

			core := testruby.Gcore(t, p.PID())
			out, stderr, code = rbscope(t, "core", "--json", core)
			if code != 0 {
				t.Fatalf("core --json: exit %d: %s", code, stderr)
			}
			var cdoc wire.Core
			if err := json.Unmarshal([]byte(out), &cdoc); err != nil {
				t.Fatalf("core --json: %v\n%s", err, out)
			}
			checkLocks(t, rep, cdoc.Stack, false)
		})
	}
}

// TestLocksArm64: stack --json names the locks and waits of Debian's
// arm64 Ruby 3.1 (the aarch64 table) under qemu-aarch64-static as the
// program knows them.
func TestLocksArm64(t *testing.T) {
	rb := testruby.Arm64(t)
	p, rep := startLocks(t, rb)
	doc := stackJSON(t, fmt.Sprint(p.PID()))
	checkLocks(t, rep, doc, false)
}

// TestLocksVariants: stack names the same locks and waits with YJIT and
// with M:N threads, where the Ruby has them.
func TestLocksVariants(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		for _, v := range testruby.Variants(t, rb)[1:] {
			t.Run(rb.Name+"/"+v.Name, func(t *testing.T) {
				rb := rb
				rb.Env = append(append([]string(nil), rb.Env...), v.Env...)
				p, rep := startLocks(t, rb)
				doc := stackJSON(t, fmt.Sprint(p.PID()))
				checkLocks(t, rep, doc, v.Name == "mn")
			})
		}
	}
}
