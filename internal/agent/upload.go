package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/rbscope/rbscope/internal/output"
)

// Backoff between failed uploads: from minBackoff, doubling, to maxBackoff.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	// uploadTimeout bounds one request.
	uploadTimeout = 10 * time.Second
)

// uploader sends a queue's profiles to one sink, one at a time, with
// retries and backoff.
type uploader struct {
	metrics *Metrics
	say     func(key, format string, args ...any)
	sink    sink
}

// sink is where an uploader sends profiles: a Pyroscope server or an
// OpenTelemetry (OTLP) receiver.
type sink interface {
	// send makes one attempt: errUnencodable when the profile cannot be
	// encoded, errAuth or a *statusError for the receiver's refusals.
	send(ctx context.Context, it *upload) error
	// where names the sink in notices (its URL).
	where() string
}

// newUploader makes the uploader to the Pyroscope server cfg.Server.
func newUploader(cfg Config, m *Metrics, say func(key, format string, args ...any)) *uploader {
	return &uploader{metrics: m, say: say, sink: newPyroscope(cfg, say)}
}

// pyroscope sends profiles to a Pyroscope server through its Push API,
// falling back to /ingest for a server without it.
type pyroscope struct {
	cfg    Config
	say    func(key, format string, args ...any)
	http   *http.Client
	push   pushv1connect.PusherServiceClient
	ingest bool // the server has no Push API: use /ingest
}

func newPyroscope(cfg Config, say func(key, format string, args ...any)) *pyroscope {
	hc := &http.Client{Timeout: uploadTimeout}
	return &pyroscope{cfg: cfg, say: say, http: hc,
		push: pushv1connect.NewPusherServiceClient(hc, strings.TrimSuffix(cfg.Server, "/"))}
}

func (u *pyroscope) where() string { return u.cfg.Server }

// runSafe is run, a panic in it (a bug) said once: it returns false then,
// after a pause, for the caller to run it again.
func (u *uploader) runSafe(ctx context.Context, q *queue) (ended bool) {
	defer func() {
		if r := recover(); r != nil {
			u.say("panic:upload", "rbscope agent: internal error uploading: %v (the profile at hand is lost; uploads go on)", r)
			select { // a panic that recurs does not spin
			case <-time.After(minBackoff):
			case <-ctx.Done():
			}
			ended = ctx.Err() != nil
		}
	}()
	u.run(ctx, q)
	return true
}

// run uploads until the queue is closed and empty, or ctx is done.
func (u *uploader) run(ctx context.Context, q *queue) {
	backoff := time.Duration(0)
	for {
		it, done := q.take()
		if done {
			return
		}
		if it == nil {
			select {
			case <-q.ready:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := u.send(ctx, it)
		if err == nil {
			u.metrics.uploads.WithLabelValues("ok").Inc()
			backoff = 0
			continue
		}
		if errors.Is(err, errUnencodable) {
			u.metrics.dropped.WithLabelValues("unencodable").Inc()
			continue // no attempt was made: the server is as it was
		}
		u.metrics.uploads.WithLabelValues("failed").Inc()
		if !retryable(err) {
			// Sending it again would fail again, and being put back at the
			// queue's front it would hold every other process's profiles
			// behind it: it is dropped. The server answered, so no backoff.
			u.metrics.dropped.WithLabelValues("rejected").Inc()
			continue
		}
		it.attempts++
		q.putBack(it)
		backoff = min(max(backoff*2, minBackoff), maxBackoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
	}
}

// errUnencodable is a profile that cannot be written as pprof.
var errUnencodable = errors.New("cannot encode the profile")

// statusError is an upload the receiver answered with an error status
// (at path: /ingest, or OTLP's).
type statusError struct {
	path   string
	code   int
	status string
}

func (e *statusError) Error() string { return e.path + ": " + e.status }

// retryable tells whether an upload that failed with err may succeed if
// sent again: when the server was away or failing, or refused the
// credentials (which may be fixed by a SIGHUP); not when the profile
// itself was refused as invalid (by the server, or by the client failing
// to encode the request), which would fail the same way forever.
func retryable(err error) bool {
	if errors.Is(err, errUnencodable) {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeInvalidArgument, connect.CodeInternal:
			return false
		}
		return true
	}
	var se *statusError
	if errors.As(err, &se) && se.code >= 400 && se.code < 500 {
		switch se.code {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusRequestTimeout:
			return true
		}
		return false
	}
	return true // unreachable, timed out, 5xx
}

// send makes one attempt, saying once per kind of failure what went wrong.
func (u *uploader) send(ctx context.Context, it *upload) error {
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	err := u.sink.send(ctx, it)
	if err != nil && !errors.Is(err, errUnencodable) {
		var ce *connect.Error
		switch {
		case errors.As(err, &ce) && (ce.Code() == connect.CodeUnauthenticated || ce.Code() == connect.CodePermissionDenied),
			errors.Is(err, errAuth):
			u.say("auth:"+u.sink.where(), "rbscope agent: %s refuses the credentials (%v): check --basic-auth-user, --basic-auth-password-file and --tenant-id; profiling goes on, uploads are retried", u.sink.where(), err)
		case !retryable(err):
			u.say("rejected:"+u.sink.where(), "rbscope agent: %s refused a profile of %s as invalid (%v); dropped, not retried (others refused so too are dropped silently)", u.sink.where(), it.labels["service_name"], err)
		default:
			u.say("unreachable:"+u.sink.where(), "rbscope agent: cannot upload to %s (%v); profiles wait in a queue of %d, the oldest dropped first", u.sink.where(), err, queueLength)
		}
	}
	return err
}

// send encodes the profile as pprof and pushes it.
func (u *pyroscope) send(ctx context.Context, it *upload) error {
	var pprof bytes.Buffer
	if err := output.Pprof(&pprof, it.profile); err != nil {
		u.say("unencodable", "rbscope agent: a profile of %s cannot be encoded (%v); dropped (others like it are dropped silently)", it.labels["service_name"], err)
		return fmt.Errorf("%w: %w", errUnencodable, err)
	}
	var err error
	if !u.ingest {
		err = u.pushOne(ctx, it, pprof.Bytes())
		var ce *connect.Error
		if errors.As(err, &ce) && (ce.Code() == connect.CodeUnimplemented || ce.Code() == connect.CodeNotFound) {
			u.ingest = true
			u.say("ingest", "rbscope agent: %s has no Push API; using /ingest", u.cfg.Server)
		}
	}
	if u.ingest {
		err = u.ingestOne(ctx, it, pprof.Bytes())
	}
	return err
}

// pushOne sends a profile through POST /push.v1.PusherService/Push.
func (u *pyroscope) pushOne(ctx context.Context, it *upload, pprof []byte) error {
	keys := make([]string, 0, len(it.labels))
	for k := range it.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var labels []*typesv1.LabelPair
	for _, k := range keys {
		labels = append(labels, &typesv1.LabelPair{Name: k, Value: it.labels[k]})
	}
	req := connect.NewRequest(&pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{{
		Labels:  labels,
		Samples: []*pushv1.RawSample{{RawProfile: pprof}},
	}}})
	u.headers(req.Header())
	_, err := u.push.Push(ctx, req)
	return err
}

// errAuth is an /ingest upload the server refused for its credentials.
var errAuth = errors.New("401/403")

// ingestOne sends a profile to the older /ingest?format=pprof endpoint.
func (u *pyroscope) ingestOne(ctx context.Context, it *upload, pprof []byte) error {
	var tags []string
	for k, v := range it.labels {
		if k != "__name__" && k != "service_name" {
			tags = append(tags, fmt.Sprintf("%s=%s", k, v))
		}
	}
	sort.Strings(tags)
	p := it.profile
	suffix := ".cpu"
	if p.Wall {
		suffix = ".wall"
	}
	q := url.Values{
		"name":       {it.labels["service_name"] + suffix + "{" + strings.Join(tags, ",") + "}"},
		"format":     {"pprof"},
		"from":       {fmt.Sprint(p.Start.Unix())},
		"until":      {fmt.Sprint(p.Start.Add(p.Duration).Unix())},
		"sampleRate": {fmt.Sprint(int(u.cfg.Rate))},
		"spyName":    {"rbscope"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(u.cfg.Server, "/")+"/ingest?"+q.Encode(), bytes.NewReader(pprof))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	u.headers(req.Header)
	resp, err := u.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("/ingest: %s: %w", resp.Status, errAuth)
	case resp.StatusCode >= 300:
		return &statusError{path: "/ingest", code: resp.StatusCode, status: resp.Status}
	}
	return nil
}

// headers sets the tenant and the credentials.
func (u *pyroscope) headers(h http.Header) {
	if u.cfg.TenantID != "" {
		h.Set("X-Scope-OrgID", u.cfg.TenantID)
	}
	if u.cfg.BasicAuthUser != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.cfg.BasicAuthUser+":"+u.cfg.BasicAuthPassword)))
	}
}
