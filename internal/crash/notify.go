package crash

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/smtp"
	neturl "net/url"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

// notify sends the report where the config says, within ctx's time, and
// records each outcome in the report. It returns how many it tried.
func notify(ctx context.Context, r *crashreport.Report, cfg *Config) int {
	tried := 0
	sent := forNotification(r)
	if cfg.Webhook != "" {
		tried++
		err := CheckWebhook(cfg.Webhook, cfg.InsecureNotify)
		if err == nil {
			err = postWebhook(ctx, sent, cfg.Webhook)
		}
		r.Notified = append(r.Notified, outcome("webhook", cfg.Webhook, err))
	}
	if cfg.Email != "" && cfg.SMTP != "" {
		tried++
		err := sendEmail(ctx, sent, cfg.SMTP, cfg.Email, cfg.InsecureNotify)
		r.Notified = append(r.Notified, outcome("email", cfg.Email, err))
	}
	return tried
}

// forNotification is the report as it leaves the host: without the
// process's environment, which holds credentials more often than not (what
// redaction misses stays in the local report, readable by root only).
func forNotification(r *crashreport.Report) *crashreport.Report {
	c := *r
	c.Proc.Environ = nil
	return &c
}

// CheckWebhook refuses a webhook URL that is not https, unless insecure.
func CheckWebhook(url string, insecure bool) error {
	u, err := neturl.Parse(url)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("webhook %q is not an http(s) URL", url)
	}
	if u.Scheme != "https" && !insecure {
		return fmt.Errorf("webhook %q is not https: reports would travel in clear (allow it with --insecure-notify)", url)
	}
	return nil
}

func outcome(kind, to string, err error) crashreport.Notification {
	n := crashreport.Notification{Kind: kind, To: to, OK: err == nil}
	if err != nil {
		n.Error = err.Error()
	}
	return n
}

func postWebhook(ctx context.Context, r *crashreport.Report, url string) error {
	body, err := wire.Versioned(wire.NewCrashReport(r))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

func sendEmail(ctx context.Context, r *crashreport.Report, server, to string, insecure bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", server)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	host, _, _ := net.SplitHostPort(server)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return err
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host}); err != nil {
			return fmt.Errorf("STARTTLS with %s: %w", server, err)
		}
	} else if !insecure {
		return fmt.Errorf("SMTP server %s offers no STARTTLS: the report would travel in clear (allow it with --insecure-notify)", server)
	}
	from := "rbscope@localhost"
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	var txt bytes.Buffer
	WriteText(&txt, r)
	subject := fmt.Sprintf("rbscope: %s crashed with %s (pid %d)", r.Exe, r.SignalName, r.PID)
	msg := "From: " + from + "\r\nTo: " + textsafe.Header(to) + "\r\nSubject: " + textsafe.Header(subject) + "\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
		strings.ReplaceAll(txt.String(), "\n", "\r\n")
	if _, err := w.Write([]byte(msg)); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}
