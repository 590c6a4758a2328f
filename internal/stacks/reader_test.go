package stacks

import (
	"slices"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestReaderSelection reads a real Ruby's threads through one Reader as
// the sampler does, read after read: a read that stops one thread reads
// that thread's stack alone (and unwinds its native stack alone), the
// next one, of another thread, keeps nothing of the first, and a read of
// every thread agrees with the program's Thread.list; the stack read for
// a thread ends in the method the program says it is in.
func TestReaderSelection(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		if testruby.Older(rb, 3, 1) {
			continue // no Thread#native_thread_id to tell the threads' TIDs
		}
		t.Run(rb.Name, func(t *testing.T) {
			var self struct{ A, B, Threads int }
			pid := testruby.StartInline(t, rb, `
require "json"
def park_a; sleep; end
def park_b; sleep; end
a = Thread.new { Thread.current.name = "a"; park_a }
b = Thread.new { Thread.current.name = "b"; park_b }
sleep 0.01 until a.status == "sleep" && b.status == "sleep"
puts JSON.generate("a" => a.native_thread_id, "b" => b.native_thread_id, "threads" => Thread.list.size)
$stdout.flush
sleep`, &self)
			l, vm := testvm.Attach(t, pid)
			r := NewReader(l, vm, ReaderOptions{Native: true})
			defer r.Close()
			for _, c := range []struct {
				tid  int
				name string
			}{{self.A, "a"}, {self.B, "b"}} {
				if err := r.Prepare(); err != nil {
					t.Fatal(err)
				}
				ths, err := r.List()
				if err != nil {
					t.Fatal(err)
				}
				read, err := r.Read(&Selection{Threads: ths, TIDs: []int{c.tid}})
				if err != nil {
					t.Fatal(err)
				}
				if len(read.Threads) != 1 || read.Threads[0].Name != c.name || !slices.Equal(read.Stopped, []int{c.tid}) {
					t.Fatalf("a read of tid %d (%s) read %v, stopped %v", c.tid, c.name, threadNames(read.Threads), read.Stopped)
				}
				if got := rubyLabels(read.Threads[0]); !slices.ContainsFunc(got, func(l string) bool { return strings.HasSuffix(l, "park_"+c.name) }) {
					t.Errorf("thread %s's stack %q lacks park_%s", c.name, got, c.name)
				}
				for _, tid := range []int{self.A, self.B} {
					fs, tried, err := r.Native(tid)
					if tried != (tid == c.tid) {
						t.Errorf("after a read of tid %d, native stack of tid %d tried: %v", c.tid, tid, tried)
					}
					// (musl's C library has no CFI: its stacks end at the
					// first frame, and say why)
					if _, regs := r.Regs(tid); tid == c.tid && (len(fs) == 0 || !regs) {
						t.Errorf("tid %d's native stack: %d frames, registers %v, %v", tid, len(fs), regs, err)
					}
				}
			}
			read, err := r.Read(&Selection{})
			if err != nil {
				t.Fatal(err)
			}
			if len(read.Threads) != self.Threads {
				t.Errorf("a read of every thread read %d Ruby threads, Thread.list has %d", len(read.Threads), self.Threads)
			}
		})
	}
}

func threadNames(ths []rubyvm.Thread) []string {
	var out []string
	for _, th := range ths {
		out = append(out, th.Name)
	}
	return out
}

func rubyLabels(th rubyvm.Thread) []string {
	var out []string
	for _, f := range th.Frames {
		out = append(out, f.Label)
	}
	return out
}
