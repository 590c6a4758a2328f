package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// crashStoreConfig copies the stored report of a real crash to a store
// and returns the crash handler config naming it, and the crash's ID.
func crashStoreConfig(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	src := testruby.Testdata("golden/crash-store")
	ids, err := os.ReadDir(src)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no stored crash report in %s: %v", src, err)
	}
	id := ids[0].Name()
	store := filepath.Join(dir, "store")
	os.MkdirAll(filepath.Join(store, id), 0o700)
	b, err := os.ReadFile(filepath.Join(src, id, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(store, id, "report.json"), b, 0o600)
	config := filepath.Join(dir, "crash.json")
	os.WriteFile(config, []byte(fmt.Sprintf(`{"dir": %q}`, store)), 0o600)
	return config, id
}

// TestUICrashes holds the crash views to crash list --json and crash show.
func TestUICrashes(t *testing.T) {
	config, id := crashStoreConfig(t)
	s := startUI(t, "--crash-config", config)
	stdout, stderr, code := rbscope(t, "crash", "list", "--json", "--config", config)
	var cli, got wire.CrashList
	if code != 0 || json.Unmarshal([]byte(stdout), &cli) != nil {
		t.Fatalf("crash list: %s %s", stdout, stderr)
	}
	s.get(t, "/api/crashes", &got)
	if len(cli.Crashes) != 1 || fmt.Sprint(got) != fmt.Sprint(cli) {
		t.Errorf("crashes: %+v\ncrash list --json: %+v", got, cli)
	}
	text, _, code := rbscope(t, "crash", "show", id, "--config", config)
	var rep struct{ Text string }
	s.get(t, "/api/crash?id="+id, &rep)
	if code != 0 || rep.Text != text || !strings.Contains(text, "SIG") {
		t.Errorf("crash %s: page text differs from crash show:\n%s\n---\n%s", id, rep.Text, text)
	}
	// No store: one message.
	s2 := startUI(t, "--crash-config", filepath.Join(t.TempDir(), "none.json"))
	resp, err := http.Get(s2.base + "/api/crashes?token=" + s2.token)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"error":"no crash store: `) {
		t.Errorf("no store: %d %s", resp.StatusCode, b)
	}
}
