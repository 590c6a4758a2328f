package crash

import (
	"regexp"
	"strings"
	"sync"
)

// Secrets are kept out of reports by the name of the variable that holds
// them and by the look of the value, wherever it is (environment or
// command line). The expressions are compiled when a report first needs
// them, not at every start of rbscope.
var (
	// secretKey matches environment variable names whose values are secret.
	secretKey = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSW|PASSWD|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|_PWD$|_DSN$|^BUNDLE_)`)
	})
	// urlUserinfo matches the user information of a URL
	// ("postgres://app:pw@db/x"), which holds a password or a token.
	urlUserinfo = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@`) })
	// secretFlag matches a command-line option that carries a secret in its
	// value ("--db-password=pw").
	secretFlag = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?i)^(-{1,2}[a-z0-9_.-]*(passw|secret|token|api[_-]?key|credential)[a-z0-9_.-]*=).+`)
	})
)

// redacted stands for a secret left out.
const redacted = "[redacted]"

// redactEnv returns value, or redacted when the variable key holds a
// secret, with URL user information left out either way.
func redactEnv(key, value string) string {
	if secretKey().MatchString(key) {
		return redacted
	}
	return redactValue(value)
}

// redactValue leaves URL user information out of v.
func redactValue(v string) string {
	if !strings.Contains(v, "@") {
		return v
	}
	return urlUserinfo().ReplaceAllString(v, "${1}"+redacted+"@")
}

// redactArgs returns a command line with secret option values and URL user
// information left out. An option naming a secret with its value in the
// next argument ("--password pw") has that argument left out.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch {
		case secretFlag().MatchString(a):
			out[i] = secretFlag().ReplaceAllString(a, "${1}"+redacted)
		case i > 0 && isSecretOption(args[i-1]):
			out[i] = redacted
		default:
			out[i] = redactValue(a)
		}
	}
	return out
}

// isSecretOption reports whether a is an option without a value that names
// a secret ("--password", "-p" is not guessed).
func isSecretOption(a string) bool {
	return strings.HasPrefix(a, "--") && !strings.Contains(a, "=") && secretFlag().MatchString(a+"=x")
}
