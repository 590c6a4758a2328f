package ui

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve starts a server on a random loopback port with files and returns
// it and its base URL (no token).
func serve(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.CacheDir == "" {
		o.CacheDir = t.TempDir()
	}
	s, err := New(ln, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

func do(t *testing.T, method, u string, hdr map[string]string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestGuard(t *testing.T) {
	s, base := serve(t, Options{})
	tok := "token=" + s.guard.token
	u, _ := url.Parse(base)
	port := u.Port()
	cookie := s.guard.cookie + "=" + s.guard.token
	for _, tc := range []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		want   int
	}{
		{"page with the token", "GET", "/?" + tok, nil, 200},
		{"api with the token", "GET", "/api/files?" + tok, nil, 200},
		{"api with the cookie", "GET", "/api/files", map[string]string{"Cookie": cookie}, 200},
		{"localhost Host", "GET", "/api/files?" + tok, map[string]string{"Host": "localhost:" + port}, 200},
		{"no token", "GET", "/api/files", nil, 403},
		{"no token, page", "GET", "/", nil, 403},
		{"no token, assets", "GET", "/assets/app.js", nil, 403},
		{"wrong token", "GET", "/api/files?token=" + strings.Repeat("0", len(s.guard.token)), nil, 403},
		{"wrong cookie", "GET", "/api/files", map[string]string{"Cookie": s.guard.cookie + "=x"}, 403},
		{"foreign Host (DNS rebinding)", "GET", "/api/files?" + tok, map[string]string{"Host": "attacker.example:" + port}, 403},
		{"loopback Host, other port", "GET", "/api/files?" + tok, map[string]string{"Host": "127.0.0.1:1"}, 403},
		{"POST without CSRF", "POST", "/api/upload?name=x.json&" + tok, nil, 403},
		{"POST with a wrong CSRF", "POST", "/api/upload?name=x.json&" + tok, map[string]string{"X-CSRF-Token": "nope"}, 403},
		{"POST with the token in the URL only", "POST", "/api/upload?name=x.json&" + tok, map[string]string{"X-CSRF-Token": s.guard.token}, 403},
		{"PUT", "PUT", "/api/files?" + tok, nil, 405},
		{"DELETE", "DELETE", "/api/files?" + tok, nil, 405},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.hdr, strings.NewReader(`{}`))
		if code != tc.want {
			t.Errorf("%s: %s %s: status %d, want %d (%s)", tc.name, tc.method, tc.path, code, tc.want, strings.TrimSpace(body))
		}
	}
	// The page carries the CSRF token; a POST with it goes through.
	code, body := do(t, "GET", base+"/?"+tok, nil, nil)
	if code != 200 || !strings.Contains(body, `content="`+s.guard.csrf+`"`) {
		t.Fatalf("page: %d, no CSRF token in it", code)
	}
	code, body = do(t, "POST", base+"/api/upload?name=x.json&"+tok, map[string]string{"X-CSRF-Token": s.guard.csrf}, strings.NewReader("{}\n"))
	if code != 200 {
		t.Fatalf("POST with the CSRF token: %d %s", code, body)
	}
}

func TestHeaders(t *testing.T) {
	s, base := serve(t, Options{})
	resp, err := http.Get(base + "/?token=" + s.guard.token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == s.guard.cookie {
			c = k
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("token cookie %+v: want HttpOnly, SameSite=Strict", c)
	}
	// The page and its assets name nothing outside the server.
	for _, p := range []string{"/", "/assets/app.js", "/assets/app.css"} {
		_, body := do(t, "GET", base+p+"?token="+s.guard.token, nil, nil)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "fonts.g"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s mentions %q", p, bad)
			}
		}
	}
}

// TestUpload: a dropped file is kept 0600 and opened; a bad one gives one
// message and the server serves the rest.
func TestUpload(t *testing.T) {
	cache := t.TempDir()
	s, base := serve(t, Options{CacheDir: cache})
	hdr := map[string]string{"X-CSRF-Token": s.guard.csrf, "Cookie": s.guard.cookie + "=" + s.guard.token}
	dump := `{"type":"ROOT", "root":"vm", "references":["0x10"]}
{"address":"0x10", "type":"ARRAY", "length":1, "references":["0x18"], "memsize":40}
{"address":"0x18", "type":"STRING", "value":"x", "memsize":40}
`
	code, body := do(t, "POST", base+"/api/upload?name=../../a*b.json", hdr, strings.NewReader(dump))
	var fi fileInfo
	if code != 200 || json.Unmarshal([]byte(body), &fi) != nil || fi.Name != "a*b.json" {
		t.Fatalf("upload: %d %s", code, body)
	}
	code, body = do(t, "POST", base+"/api/upload?name=cut.json", hdr, strings.NewReader(dump[:len(dump)-20]))
	if code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "dropped", "[0-9]*"))
	if len(files) != 2 {
		t.Fatalf("dropped files: %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode())
		}
	}
	if st, err := os.Stat(filepath.Join(cache, "dropped")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dropped dir: %v, want 0700", st.Mode())
	}
	get := func(path string) (int, string) { return do(t, "GET", base+path, hdr, nil) }
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body = get("/api/files")
		if !strings.Contains(body, `"loading"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body = get("/api/heap/top?f=0&n=5")
	if code != 200 || !strings.Contains(body, `"reachable":2`) {
		t.Errorf("top of the dropped dump: %d %s", code, body)
	}
	code, body = get("/api/heap/top?f=1")
	if code != 422 || !strings.Contains(body, `cut.json: not a usable heap dump: `) || !strings.Contains(body, "line 3: invalid JSON") {
		t.Errorf("cut dump: %d %s", code, body)
	}
	code, body = get("/api/heap/object?f=0&addr=0x18")
	if code != 200 || !strings.Contains(body, `"roots":[]`) || !strings.Contains(body, `"referrers":{"offset":0,"total":1`) {
		t.Errorf("object: %d %s", code, body)
	}
	for path, want := range map[string]int{
		"/api/heap/object?f=0&addr=0x99":  400,
		"/api/heap/object?f=0&addr=zz":    400,
		"/api/heap/overview?f=0&by=nope":  400,
		"/api/heap/overview?f=0&limit=-1": 400,
		"/api/heap/overview?f=9":          404,
		"/api/profile/functions?f=0":      400,
		"/api/heap/overview?f=0":          200,
	} {
		if code, body := get(path); code != want || (want != 200 && !strings.Contains(body, `"error"`)) {
			t.Errorf("%s: %d %s, want %d", path, code, body, want)
		}
	}
}
