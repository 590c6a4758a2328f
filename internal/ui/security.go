package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

// guard holds what every request must show: the token (in the URL's
// token parameter, or the cookie the first tokened request sets), a Host
// header naming this server (so a page of another site whose name was
// rebound to 127.0.0.1 is refused), and, for a POST, the CSRF token the
// page carries.
type guard struct {
	token  string
	csrf   string
	cookie string
	hosts  map[string]bool
}

// newGuard makes fresh random tokens for a server listening at addr
// (host:port); listenHost is the host --listen named ("" for the default).
func newGuard(addr net.Addr, listenHost string) (*guard, error) {
	tok, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	csrf, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil, err
	}
	g := &guard{token: tok, csrf: csrf, cookie: "rbscope_ui_" + port, hosts: map[string]bool{}}
	for _, h := range []string{"127.0.0.1", "localhost", "::1", listenHost} {
		if h != "" {
			g.hosts[strings.ToLower(net.JoinHostPort(h, port))] = true
		}
	}
	return g, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// equal compares two secrets in constant time.
func equal(got, want string) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// wrap refuses what the guard does not let through, and sets the headers
// that keep the page to its own origin.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", pageCSP)
		if !g.hosts[strings.ToLower(r.Host)] {
			http.Error(w, "forbidden: unknown Host header (open the URL rbscope printed)", http.StatusForbidden)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && equal(q, g.token) {
			http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: g.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		} else if c, err := r.Cookie(g.cookie); err != nil || !equal(c.Value, g.token) {
			http.Error(w, "forbidden: no token (open the URL rbscope printed, with its token)", http.StatusForbidden)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodPost:
			if !equal(r.Header.Get("X-CSRF-Token"), g.csrf) {
				http.Error(w, "forbidden: no CSRF token", http.StatusForbidden)
				return
			}
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// pageCSP keeps every page to its own origin: no script, style, font or
// connection from anywhere else, no inline script.
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'self'"

// svgCSP is the policy of the flame graph and the stack chart,
// self-contained SVGs whose script and style are inline.
const svgCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'self'"
