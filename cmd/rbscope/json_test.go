package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/wire"
)

// snakeKey is what every key of rbscope's JSON looks like.
var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// checkSnakeCase fails the test for any object key of v (decoded JSON)
// that is not snake_case; maps keyed by data (environ, fds, registers)
// are skipped by name.
func checkSnakeCase(t *testing.T, where string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !snakeKey.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", where, k)
			}
			if k == "environ" || k == "fds" || k == "registers" {
				continue
			}
			checkSnakeCase(t, where+"."+k, e)
		}
	case []any:
		for _, e := range x {
			checkSnakeCase(t, where+"[]", e)
		}
	}
}

// TestCrashListShowJSON: crash list and show print snake_case JSON with
// a schema_version, from a store holding one report (no handler needed).
func TestCrashListShowJSON(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	const id = "20261123T120000Z-4242"
	if err := os.MkdirAll(filepath.Join(store, id), 0o700); err != nil {
		t.Fatal(err)
	}
	r := wire.CrashReport{
		ID: id, Time: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), PID: 4242, TID: 4242, Signal: 11, SignalName: "SIGSEGV",
		Exe: "/usr/bin/ruby3.1", Cmdline: []string{"ruby", "app.rb"}, Registers: map[string]string{"rip": "0x1"},
		Ruby: &wire.CrashRuby{Version: "3.1.7", Threads: []wire.Thread{{TID: 4242, Main: true, Name: "main", Status: "run",
			Frames: []wire.Frame{{Kind: "ruby", Label: "Object#boom", BaseLabel: "boom", Path: "app.rb", Line: 3}}}}},
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(store, id, "report.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "crash.json")
	cb, _ := json.Marshal(wire.CrashConfig{Dir: store})
	if err := os.WriteFile(config, cb, 0o600); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := rbscope(t, "crash", "list", "--json", "--config", config)
	if code != 0 {
		t.Fatalf("crash list --json: exit %d: %s", code, stderr)
	}
	var list struct {
		SchemaVersion int `json:"schema_version"`
		Crashes       []struct {
			ID           string `json:"id"`
			PID          int    `json:"pid"`
			Signal       string `json:"signal"`
			TopRubyFrame string `json:"top_ruby_frame"`
		} `json:"crashes"`
	}
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("crash list --json: %v\n%s", err, stdout)
	}
	if list.SchemaVersion != wire.SchemaVersion || len(list.Crashes) != 1 || list.Crashes[0].ID != id || list.Crashes[0].PID != 4242 ||
		list.Crashes[0].Signal != "SIGSEGV" || list.Crashes[0].TopRubyFrame != "Object#boom (app.rb:3)" {
		t.Errorf("crash list --json:\n%s", stdout)
	}
	var any1 any
	json.Unmarshal([]byte(stdout), &any1)
	checkSnakeCase(t, "crash list", any1)

	stdout, stderr, code = rbscope(t, "crash", "show", id, "--json", "--config", config)
	if code != 0 {
		t.Fatalf("crash show --json: exit %d: %s", code, stderr)
	}
	var show map[string]any
	if err := json.Unmarshal([]byte(stdout), &show); err != nil {
		t.Fatalf("crash show --json: %v\n%s", err, stdout)
	}
	if show["schema_version"] != float64(wire.SchemaVersion) || show["id"] != id || !strings.HasPrefix(stdout, fmt.Sprintf("{\n  \"schema_version\": %d,", wire.SchemaVersion)) {
		t.Errorf("crash show --json:\n%s", stdout)
	}
	checkSnakeCase(t, "crash show", show)

	stdout, _, _ = rbscope(t, "crash", "status", "--json", "--config", config)
	var status map[string]any
	if err := json.Unmarshal([]byte(stdout), &status); err != nil || status["schema_version"] != float64(wire.SchemaVersion) {
		t.Errorf("crash status --json: %v\n%s", err, stdout)
	}
	checkSnakeCase(t, "crash status", status)
}

// TestCrashVersionedJSON: lists are wrapped under a key, objects get
// schema_version as their first key, and nothing else changes.
func TestCrashVersionedJSON(t *testing.T) {
	b, err := wire.Versioned(struct {
		A int `json:"a"`
	}{7})
	if err != nil || string(b) != fmt.Sprintf(`{"schema_version":%d,"a":7}`, wire.SchemaVersion) {
		t.Errorf("versioned = %s, %v", b, err)
	}
	if b, err := wire.Versioned(struct{}{}); err != nil || string(b) != fmt.Sprintf(`{"schema_version":%d}`, wire.SchemaVersion) {
		t.Errorf("wire.Versioned(empty) = %s, %v", b, err)
	}
	if _, err := wire.Versioned([]int{1}); err == nil {
		t.Error("a list was versioned as an object")
	}
}
