package crash

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"DATABASE_URL", "postgres://app:hunter2@db:5432/x", "postgres://[redacted]@db:5432/x"},
		{"REDIS_URL", "redis://:pw@cache:6379/0", "redis://[redacted]@cache:6379/0"},
		{"MYSQL_PWD", "hunter2", redacted},
		{"SENTRY_DSN", "https://abc@o1.ingest.example/2", redacted},
		{"BUNDLE_GEMS__EXAMPLE__COM", "user:pw", redacted},
		{"GITHUB_TOKEN", "ghp_x", redacted},
		{"HOME", "/home/app", "/home/app"},
		{"MAILTO", "ops@example.test", "ops@example.test"},
	} {
		if got := redactEnv(c.key, c.value); got != c.want {
			t.Errorf("%s=%s redacted as %q, want %q", c.key, c.value, got, c.want)
		}
	}
	args := redactArgs([]string{"ruby", "app.rb", "--db-password=hunter2", "--password", "pw2", "--url=mysql://u:p@h/d", "--port=5", "--api-key=k", "-e", "puts 1"})
	got := strings.Join(args, " ")
	want := "ruby app.rb --db-password=[redacted] --password [redacted] --url=mysql://[redacted]@h/d --port=5 --api-key=[redacted] -e puts 1"
	if got != want {
		t.Errorf("command line redacted as\n%s\nwant\n%s", got, want)
	}
}
