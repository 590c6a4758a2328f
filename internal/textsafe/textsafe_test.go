package textsafe

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"/app/models/user.rb":    "/app/models/user.rb",
		"block in <main>":        "block in <main>",
		"caf\u00e9 \u65e5\u672c": "caf\u00e9 \u65e5\u672c",
		"\x1b]0;pwned\x07":       `\x1b]0;pwned\x07`,
		"a\r\nSubject: x":        `a\x0d\x0aSubject: x`,
		"tab\there":              `tab\x09here`,
		"\xff\xfe":               `\xff\xfe`,
		"\u202egnp.exe":          `\u202egnp.exe`,
		"\u009b31m":              `\x9b31m`,
		`back\slash`:             `back\\slash`,
		"del\x7f":                `del\x7f`,
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
		if got := Header(in); strings.ContainsAny(got, "\r\n") {
			t.Errorf("Header(%q) = %q holds CR or LF", in, got)
		}
	}
}
