package agent

import (
	"sync"

	"github.com/rbscope/rbscope/internal/profile"
)

// upload is one profile waiting for the server.
type upload struct {
	labels   map[string]string
	profile  *profile.Profile
	attempts int
}

// queue holds the uploads the server has not taken yet: at most max, the
// oldest dropped (and counted) when a new one comes to a full queue, so
// that sampling never waits for the server and memory stays bounded.
type queue struct {
	mu      sync.Mutex
	items   []*upload
	max     int
	closed  bool
	ready   chan struct{} // signalled when an item comes or the queue closes
	metrics *Metrics
}

func newQueue(max int, m *Metrics) *queue {
	return &queue{max: max, ready: make(chan struct{}, 1), metrics: m}
}

func (q *queue) put(u *upload) {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.items = q.items[1:]
		q.metrics.dropped.WithLabelValues("queue_full").Inc()
	}
	q.items = append(q.items, u)
	q.metrics.queue.Set(float64(len(q.items)))
	q.mu.Unlock()
	q.signal()
}

// putBack returns an upload that failed to the queue's front, unless newer
// ones have filled it meanwhile (then it is dropped).
func (q *queue) putBack(u *upload) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= q.max {
		q.metrics.dropped.WithLabelValues("queue_full").Inc()
		return
	}
	q.items = append([]*upload{u}, q.items...)
	q.metrics.queue.Set(float64(len(q.items)))
}

// take returns the oldest upload, or nil when the queue is empty; done
// tells that it is empty and closed.
func (q *queue) take() (u *upload, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, q.closed
	}
	u, q.items = q.items[0], q.items[1:]
	q.metrics.queue.Set(float64(len(q.items)))
	return u, false
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// close says no more uploads come: the uploader ends once it is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
