package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// crashStore copies the stored report of a real crash (the golden store's,
// written by an rbscope of schema version 1) to a store, and returns the
// store and the crash's ID.
func crashStore(t *testing.T) (string, string) {
	t.Helper()
	src := testruby.Testdata("golden/crash-store")
	ids, err := os.ReadDir(src)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no stored crash report in %s: %v", src, err)
	}
	id := ids[0].Name()
	store := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(filepath.Join(store, id), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(src, id, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, id, "report.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return store, id
}

// TestCrashViews holds the crash views to what crash list --json and
// crash show print of the same store (the same packages' answers): the
// list's document, and the report with its text. The stored report is of
// schema version 1 and shows in the current spelling. A report that
// cannot be read is listed saying why; no store is one message.
func TestCrashViews(t *testing.T) {
	store, id := crashStore(t)
	ts := newTestServer(t, Options{CrashDir: store})

	entries, err := crash.ListReports(store)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.CrashList
	ts.get(t, "/api/crashes", &got)
	if want := wire.NewCrashList(entries); len(got.Crashes) != 1 || !reflect.DeepEqual(&got, want) || got.Crashes[0].TopRubyFrame == "" {
		t.Errorf("crashes: %+v\ncrash list --json: %+v", got, want)
	}

	rep, err := crash.Load(store, id)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	crash.WriteText(&text, rep)
	var page struct {
		Report map[string]any
		Text   string
	}
	ts.get(t, "/api/crash?id="+id, &page)
	if page.Text != text.String() || !strings.Contains(page.Text, "SIGSEGV") || !strings.Contains(page.Text, "raise+0x12 (libc.so.6)") {
		t.Errorf("crash %s: page text differs from crash show:\n%s\n---\n%s", id, page.Text, text.String())
	}
	// The report as crash show --json prints it: a version-1 report's
	// native frames in the one spelling of a native frame.
	want, _ := json.Marshal(wire.NewCrashReport(rep))
	if b, _ := json.Marshal(page.Report); !jsonEqual(t, b, want) || !strings.Contains(string(b), `"function":"raise","function_offset":"0x12"`) || strings.Contains(string(b), `"symbol"`) {
		t.Errorf("the report the page gets:\n%s\nwant\n%s", b, want)
	}

	// A crash whose report is not JSON: listed, saying why; its page is a 404.
	if err := os.MkdirAll(filepath.Join(store, "20261126T000000Z-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(store, "20261126T000000Z-1", "report.json"), []byte("{cut"), 0o600)
	ts.get(t, "/api/crashes", &got)
	if len(got.Crashes) != 2 || !strings.HasPrefix(got.Crashes[1].Signal, "(no report: ") {
		t.Errorf("crashes with a broken report: %+v", got.Crashes)
	}
	if code, msg := ts.getError(t, "/api/crash?id=20261126T000000Z-1"); code != http.StatusNotFound || !strings.Contains(msg, "report.json") {
		t.Errorf("broken report: %d %q", code, msg)
	}
	if code, msg := ts.getError(t, "/api/crash?id=../etc"); code != http.StatusNotFound || !strings.Contains(msg, "bad crash id") {
		t.Errorf("an id out of the store: %d %q", code, msg)
	}

	// No store: one message.
	none := newTestServer(t, Options{CrashErr: errors.New("no crash store: /etc/rbscope/crash.json: no such file")})
	if code, msg := none.getError(t, "/api/crashes"); code != http.StatusNotFound || !strings.HasPrefix(msg, "no crash store: ") {
		t.Errorf("no store: %d %q", code, msg)
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		t.Errorf("not JSON: %s / %s", a, b)
		return false
	}
	return reflect.DeepEqual(va, vb)
}
