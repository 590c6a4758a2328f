package pushapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
)

// recorder is Pyroscope's own generated Push handler's backend: it keeps
// what it was sent and answers with err.
type recorder struct {
	got    *pushv1.PushRequest
	header http.Header
	err    error
}

func (r *recorder) Push(_ context.Context, req *connect.Request[pushv1.PushRequest]) (*connect.Response[pushv1.PushResponse], error) {
	r.got, r.header = req.Msg, req.Header()
	if r.err != nil {
		return nil, r.err
	}
	return connect.NewResponse(&pushv1.PushResponse{}), nil
}

func serve(t *testing.T, r *recorder) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(pushv1connect.NewPusherServiceHandler(r))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPushDecodes: what Push writes is what Pyroscope's generated code
// reads, labels in order, the profile's bytes whole, headers passed on.
func TestPushDecodes(t *testing.T) {
	r := &recorder{}
	url := serve(t, r)
	labels := []Label{{"__name__", "process_cpu"}, {"empty", ""}, {"service_name", "app é"}}
	profile := []byte{0x1f, 0x8b, 0, 1, 2, 3}
	h := http.Header{"X-Scope-Orgid": {"tenant"}}
	if err := Push(context.Background(), http.DefaultClient, url+"/", labels, profile, h); err != nil {
		t.Fatal(err)
	}
	if len(r.got.Series) != 1 || len(r.got.Series[0].Samples) != 1 {
		t.Fatalf("got %v", r.got)
	}
	s := r.got.Series[0]
	var got []Label
	for _, l := range s.Labels {
		got = append(got, Label{l.Name, l.Value})
	}
	if !reflect.DeepEqual(got, labels) {
		t.Errorf("labels %v, want %v", got, labels)
	}
	if p := s.Samples[0].RawProfile; !reflect.DeepEqual(p, profile) {
		t.Errorf("profile %x, want %x", p, profile)
	}
	if r.header.Get("X-Scope-OrgID") != "tenant" {
		t.Errorf("headers %v", r.header)
	}
}

// TestPushErrors: a Connect error keeps its code; a bare HTTP status maps
// as Connect's clients map it; a label that is not UTF-8 is not sent.
func TestPushErrors(t *testing.T) {
	r := &recorder{err: connect.NewError(connect.CodeInvalidArgument, errors.New("bad label"))}
	url := serve(t, r)
	err := Push(context.Background(), http.DefaultClient, url, []Label{{"service_name", "x"}}, []byte{1}, nil)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeInvalidArgument || pe.Message != "bad label" {
		t.Errorf("a refusal: %v", err)
	}
	r.got = nil
	err = Push(context.Background(), http.DefaultClient, url, []Label{{"service_name", "not\xffutf8"}}, []byte{1}, nil)
	if !errors.As(err, &pe) || pe.Code != CodeInternal || r.got != nil {
		t.Errorf("invalid UTF-8: %v (sent: %v)", err, r.got != nil)
	}
	for status, want := range map[int]Code{404: CodeUnimplemented, 503: CodeUnavailable, 401: CodeUnauthenticated, 400: CodeInternal, 500: CodeUnknown} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		err := Push(context.Background(), http.DefaultClient, srv.URL, nil, []byte{1}, nil)
		srv.Close()
		if !errors.As(err, &pe) || pe.Code != want {
			t.Errorf("HTTP %d: %v, want %s", status, err, want)
		}
	}
	err = Push(context.Background(), http.DefaultClient, "http://127.0.0.1:9", nil, []byte{1}, nil)
	if !errors.As(err, &pe) || pe.Code != CodeUnavailable {
		t.Errorf("no server: %v", err)
	}
}
