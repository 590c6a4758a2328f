package rubyexec

import (
	"strings"
	"testing"
)

// TestComplete: the length header the process writes is bounded and
// checked before rbscope keeps reading.
func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		in   string
		done bool
		bad  string
	}{
		{"5\nok\nab", true, ""},
		{"5\nok\na", false, ""},
		{"12", false, ""},
		{"5\nok\nabc", false, "more bytes than announced"},
		{"x\n", false, "malformed"},
		{"-1\n", false, "malformed"},
		{strings.Repeat("9", 25), false, "malformed"},
		{"99999999999\n", false, "more than"},
		{"18446744073709551616\n", false, "malformed"},
	} {
		body, done, err := complete([]byte(tc.in))
		if done != tc.done || (err == nil) != (tc.bad == "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("complete(%q) = %q, %v, %v; want done %v, error %q", tc.in, body, done, err, tc.done, tc.bad)
		}
	}
}

// FuzzAnswer: no answer makes the parsers panic.
func FuzzAnswer(f *testing.F) {
	f.Add([]byte("5\nok\nab"))
	f.Add([]byte("20\nerror\nE\n3\nabcx\ny"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if body, done, err := complete(b); err == nil && done {
			parseAnswer(body)
		}
		parseAnswer(b)
	})
}
