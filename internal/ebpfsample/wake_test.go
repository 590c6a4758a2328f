package ebpfsample

import (
	"context"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestRingWakesWaiter: a Set's wait ends when its context does, lasts
// its timeout while the rings are quiet, and ends as soon as a program
// finds a quarter of its ring waiting: the BPF sampler on
// testdata/bench_deep.rb spinning 50 frames deep, with a 64 KiB ring.
func TestRingWakesWaiter(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	pid, vm := deepSpinner(t, rb)
	const ring = 64 << 10
	s := openOrSkip(t, pid, vm, Options{Frequency: 499, RingBytes: ring})
	w, err := newRingWaiter()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if err := w.add(s.ringFD()); err != nil {
		t.Fatal(err)
	}

	// Its context ended, a wait ends at once.
	ctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, w.interrupt)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	w.wait(ctx, time.Minute)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a wait whose context ended after 100 ms lasted %v", d)
	}
	stop()

	// Not sampling: the wait lasts its timeout.
	start = time.Now()
	w.wait(context.Background(), 300*time.Millisecond)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a wait of 300 ms on a quiet ring ended after %v", d)
	}

	// Sampling: the program wakes the wait once a quarter of the ring
	// is waiting, and not before.
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	start = time.Now()
	w.wait(context.Background(), time.Minute)
	d := time.Since(start)
	if d >= time.Minute {
		t.Fatal("the program never woke the wait: a minute passed")
	}
	if got := s.reader.AvailableBytes(); got <= ring/4 {
		t.Errorf("the wait ended after %v with %d bytes waiting in the ring, not more than a quarter of its %d", d, got, ring)
	}
	n, err := s.Drain(nil)
	if err != nil || n == 0 {
		t.Fatalf("drained %d samples: %v", n, err)
	}
	t.Logf("woken after %v, %d samples waiting", d, n)
}
