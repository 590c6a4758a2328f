package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/smtp"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/textsafe"
)

// notify sends the report where the config says, within ctx's time, and
// records each outcome in the report. It returns how many it tried.
func (r *Report) notify(ctx context.Context, cfg *Config) int {
	tried := 0
	if cfg.Webhook != "" {
		tried++
		err := r.postWebhook(ctx, cfg.Webhook)
		r.Notified = append(r.Notified, outcome("webhook", cfg.Webhook, err))
	}
	if cfg.Email != "" && cfg.SMTP != "" {
		tried++
		err := r.sendEmail(ctx, cfg.SMTP, cfg.Email)
		r.Notified = append(r.Notified, outcome("email", cfg.Email, err))
	}
	return tried
}

func outcome(kind, to string, err error) Notification {
	n := Notification{Kind: kind, To: to, OK: err == nil}
	if err != nil {
		n.Error = err.Error()
	}
	return n
}

func (r *Report) postWebhook(ctx context.Context, url string) error {
	body, err := json.Marshal(r)
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

func (r *Report) sendEmail(ctx context.Context, server, to string) error {
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
	r.WriteText(&txt)
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
