package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rbscope/rbscope/internal/profile"
)

// TestLabelsSanitized: a service name from a command line that is not
// UTF-8, or is very long, becomes a label value a server takes.
func TestLabelsSanitized(t *testing.T) {
	a := New(Config{Tags: map[string]string{"env": "pr\xffod"}}, NewMetrics())
	l := a.labels(7, "/opt/app/\xff\xfeworker"+strings.Repeat("é", 300)+" --flag")
	for k, v := range l {
		if !utf8.ValidString(v) || len(v) > maxLabelValue {
			t.Errorf("label %s = %q (%d bytes): want valid UTF-8 of at most %d bytes", k, v, len(v), maxLabelValue)
		}
	}
	if !strings.HasPrefix(l["service_name"], "\uFFFDworker") {
		t.Errorf("service_name %q: want the name kept, its invalid bytes replaced", l["service_name"])
	}
	if l["env"] != "pr\uFFFDod" || l["pid"] != "7" {
		t.Errorf("labels %v", l)
	}
}

// judgingPusher refuses the profiles of service "bad" as invalid and
// takes the others.
type judgingPusher struct {
	mu       sync.Mutex
	accepted []string
	refused  int
}

func (p *judgingPusher) Push(ctx context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range req.Msg.Series {
		for _, l := range s.Labels {
			if l.Name != "service_name" {
				continue
			}
			if l.Value == "bad" {
				p.refused++
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("invalid label value"))
			}
			p.accepted = append(p.accepted, l.Value)
		}
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

// TestUploaderDropsInvalid: a profile the client cannot encode (a label
// that is not UTF-8) and one the server refuses as invalid are dropped,
// each counted, not retried at the queue's front: the profiles behind
// them go through at once.
func TestUploaderDropsInvalid(t *testing.T) {
	p := &judgingPusher{}
	mux := http.NewServeMux()
	mux.Handle(pushv1connect.NewPusherServiceHandler(p))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	m := NewMetrics()
	said := map[string]bool{} // the kinds said (the agent's say says each once)
	u := newUploader(Config{Server: srv.URL, Rate: 100}, m, func(key, format string, args ...any) { said[key] = true })
	q := newQueue(queueLength, m)
	prof := func() *profile.Profile {
		return &profile.Profile{
			Frames:   []profile.Frame{{Kind: profile.KindRuby, Label: "Object#work", Path: "work.rb", Line: 3}},
			Stacks:   []profile.Stack{{Frames: []int{0}, Count: 5}},
			Samples:  5,
			Ticks:    5,
			Rate:     100,
			Start:    time.Now().Add(-time.Second),
			Duration: time.Second,
		}
	}
	q.put(&upload{labels: map[string]string{"service_name": "not\xffutf8"}, profile: prof()}) // bypasses labels()
	q.put(&upload{labels: map[string]string{"service_name": "bad"}, profile: prof()})
	q.put(&upload{labels: map[string]string{"service_name": "good"}, profile: prof()})
	q.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	u.run(ctx, q) // ends once the queue is empty: nothing put back
	if ctx.Err() != nil {
		t.Fatal("the uploader retried an invalid profile without end")
	}
	if d := time.Since(began); d >= minBackoff {
		t.Errorf("took %v: the uploader backed off for invalid profiles", d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.accepted) != 1 || p.accepted[0] != "good" || p.refused != 1 {
		t.Errorf("server accepted %v and refused %d, want [good] and 1", p.accepted, p.refused)
	}
	if n := testutil.ToFloat64(m.dropped.WithLabelValues("rejected")); n != 2 {
		t.Errorf("%v rejected drops counted, want 2", n)
	}
	if n := testutil.ToFloat64(m.uploads.WithLabelValues("ok")); n != 1 {
		t.Errorf("%v ok uploads counted, want 1", n)
	}
	if len(said) != 1 || !said["rejected:"+srv.URL] {
		t.Errorf("said %v, want only the rejection", said)
	}
}

// TestRetryable: failures that may pass if tried again are retried, the
// others not.
func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{connect.NewError(connect.CodeUnavailable, errors.New("x")), true},
		{connect.NewError(connect.CodeUnauthenticated, errors.New("x")), true},
		{connect.NewError(connect.CodeUnknown, errors.New("x")), true},
		{connect.NewError(connect.CodeInvalidArgument, errors.New("x")), false},
		{connect.NewError(connect.CodeInternal, errors.New("x")), false},
		{&statusError{code: 400, status: "400 Bad Request"}, false},
		{&statusError{code: 413, status: "413 Payload Too Large"}, false},
		{&statusError{code: 429, status: "429 Too Many Requests"}, true},
		{&statusError{code: 502, status: "502 Bad Gateway"}, true},
		{errAuth, true},
		{errUnencodable, false},
		{errors.New("dial tcp: connection refused"), true},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
