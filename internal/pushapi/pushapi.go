// Package pushapi sends a profile to a Pyroscope server's Push API (POST
// /push.v1.PusherService/Push) in the Connect protocol's unary form: the
// body a protobuf push.v1.PushRequest, an error a JSON {code, message}.
//
// The request's few fields are written here by hand, so that rbscope, one
// binary whose every command starts with every package's initialization,
// carries neither a gRPC nor a generated protobuf stack for the agent's
// one call. Its tests check it against Pyroscope's own generated Connect
// handler.
package pushapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Path is the Push API's path on the server.
const Path = "/push.v1.PusherService/Push"

// Code is a Connect error code ("invalid_argument").
type Code string

// The codes the agent tells apart, and the ones a bare HTTP status maps
// to.
const (
	CodeUnknown          Code = "unknown"
	CodeInvalidArgument  Code = "invalid_argument"
	CodeDeadlineExceeded Code = "deadline_exceeded"
	CodeNotFound         Code = "not_found"
	CodePermissionDenied Code = "permission_denied"
	CodeUnimplemented    Code = "unimplemented"
	CodeInternal         Code = "internal"
	CodeUnavailable      Code = "unavailable"
	CodeCanceled         Code = "canceled"
	CodeUnauthenticated  Code = "unauthenticated"
)

// Error is a push that failed: the server's answer, or what kept the
// request from it (unavailable, deadline_exceeded, canceled), or a
// request that cannot be written (internal).
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Label is one label of the pushed series.
type Label struct{ Name, Value string }

// Push sends one profile (pprof, gzipped or not) of the series labels to
// server (its base URL) through hc, with header's fields added to the
// request's.
func Push(ctx context.Context, hc *http.Client, server string, labels []Label, profile []byte, header http.Header) error {
	body, err := encode(labels, profile)
	if err != nil {
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(server, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return &Error{Code: CodeDeadlineExceeded, Message: err.Error()}
		case errors.Is(err, context.Canceled):
			return &Error{Code: CodeCanceled, Message: err.Error()}
		}
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &Error{Code: Code(e.Code), Message: e.Message}
	}
	return &Error{Code: httpToCode(resp.StatusCode), Message: resp.Status}
}

// httpToCode is the code of an HTTP status without a Connect error body,
// as Connect's clients map it (gRPC's HTTP mapping).
func httpToCode(status int) Code {
	switch status {
	case 400:
		return CodeInternal
	case 401:
		return CodeUnauthenticated
	case 403:
		return CodePermissionDenied
	case 404:
		return CodeUnimplemented
	case 429, 502, 503, 504:
		return CodeUnavailable
	}
	return CodeUnknown
}

// encode writes the push.v1.PushRequest of one series with one sample:
//
//	PushRequest      { repeated RawProfileSeries series = 1; }
//	RawProfileSeries { repeated types.v1.LabelPair labels = 1; repeated RawSample samples = 2; }
//	LabelPair        { string name = 1; string value = 2; }
//	RawSample        { bytes raw_profile = 1; }
//
// Strings must be UTF-8, as proto3 requires.
func encode(labels []Label, profile []byte) ([]byte, error) {
	var series []byte
	for _, l := range labels {
		if !utf8.ValidString(l.Name) || !utf8.ValidString(l.Value) {
			return nil, fmt.Errorf("label %q: string field contains invalid UTF-8", l.Name)
		}
		var pair []byte
		pair = appendString(pair, 1, []byte(l.Name))
		pair = appendString(pair, 2, []byte(l.Value))
		series = appendMessage(series, 1, pair)
	}
	series = appendMessage(series, 2, appendString(nil, 1, profile))
	return appendMessage(nil, 1, series), nil
}

// appendMessage appends field num, an embedded message (always written,
// as an element of a repeated field is).
func appendMessage(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendString appends field num, a string or bytes field, left out when
// empty (as proto3 writes it).
func appendString(b []byte, num int, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return appendMessage(b, num, v)
}
