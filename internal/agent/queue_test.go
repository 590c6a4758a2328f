package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestQueueDropsOldest: a full queue drops its oldest upload for a new
// one, a failed upload goes back to the front unless the queue filled
// meanwhile, and every drop is counted.
func TestQueueDropsOldest(t *testing.T) {
	m := NewMetrics()
	q := newQueue(2, m)
	a, b, c := &upload{labels: map[string]string{"n": "a"}}, &upload{labels: map[string]string{"n": "b"}}, &upload{labels: map[string]string{"n": "c"}}
	q.put(a)
	q.put(b)
	q.put(c)
	if got, _ := q.take(); got != b {
		t.Errorf("took %v, want b (a dropped)", got.labels)
	}
	q.putBack(b)
	if got, _ := q.take(); got != b {
		t.Errorf("after putBack took %v, want b first", got.labels)
	}
	q.put(a)
	q.putBack(b) // full: b is dropped
	if n := testutil.ToFloat64(m.dropped.WithLabelValues("queue_full")); n != 2 {
		t.Errorf("%v drops counted, want 2", n)
	}
	q.close()
	for i := 0; i < 2; i++ {
		if u, done := q.take(); u == nil || done {
			t.Fatalf("take %d: %v %v", i, u, done)
		}
	}
	if u, done := q.take(); u != nil || !done {
		t.Errorf("an empty closed queue: %v %v", u, done)
	}
}
