package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	"github.com/rbscope/rbscope/internal/otlp"
)

// otlpSink sends profiles to an OpenTelemetry receiver (OTLP/HTTP, the
// profiles signal of version otlp.SignalVersion), with the agent's labels
// as the resource's attributes.
type otlpSink struct {
	cfg    Config
	say    func(key, format string, args ...any)
	client *otlp.Client
}

// newOTLPUploader makes the uploader to the OTLP receiver
// cfg.OTLPEndpoint.
func newOTLPUploader(cfg Config, m *Metrics, say func(key, format string, args ...any)) *uploader {
	h := http.Header{}
	if cfg.TenantID != "" {
		h.Set("X-Scope-OrgID", cfg.TenantID)
	}
	if cfg.BasicAuthUser != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(cfg.BasicAuthUser+":"+cfg.BasicAuthPassword)))
	}
	return &uploader{metrics: m, say: say, sink: &otlpSink{cfg: cfg, say: say,
		client: &otlp.Client{Endpoint: cfg.OTLPEndpoint, HTTP: &http.Client{Timeout: uploadTimeout}, Header: h}}}
}

func (o *otlpSink) where() string { return o.cfg.OTLPEndpoint }

func (o *otlpSink) send(ctx context.Context, it *upload) error {
	body, err := otlp.Encode(it.profile, it.labels, o.cfg.Version)
	if err != nil {
		o.say("unencodable:otlp", "rbscope agent: a profile of %s cannot be encoded for OTLP (%v); dropped (others like it are dropped silently)", it.labels["service_name"], err)
		return fmt.Errorf("%w: %w", errUnencodable, err)
	}
	err = o.client.Send(ctx, body)
	var se *otlp.StatusError
	if errors.As(err, &se) {
		if se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden {
			return fmt.Errorf("%w: %w", errAuth, err)
		}
		return &statusError{path: otlp.Path, code: se.Code, status: se.Status}
	}
	return err
}
