package wire

import "time"

// CrashReport is what the crash handler keeps of one crash: report.json in
// the crash's directory, the body of its webhook, and the document
// `rbscope crash show --json` prints, each with schema_version first
// (NewCrashReport maps it from the model, ReadCrashReport back).
type CrashReport struct {
	ID         string    `json:"id"`
	Time       time.Time `json:"time"`
	PID        int       `json:"pid"`
	TID        int       `json:"tid"`
	UID        int64     `json:"uid"` // the crashed process's real uid (-1: unknown)
	Signal     int       `json:"signal"`
	SignalName string    `json:"signal_name"`
	Exe        string    `json:"exe"`
	Cmdline    []string  `json:"cmdline"`
	// Fault names the fault beneath a signal handler on the crashing
	// thread's stack ("SIGSEGV at 0x10 in f; its handler then ended the
	// process with SIGABRT").
	Fault     string              `json:"fault,omitempty"`
	Registers map[string]string   `json:"registers,omitempty"` // the crashing thread's
	Native    []CrashNativeThread `json:"native_threads,omitempty"`
	Ruby      *CrashRuby          `json:"ruby,omitempty"`
	Proc      CrashProc           `json:"proc"`
	Core      CrashCore           `json:"core"`
	Notified  []CrashNotification `json:"notifications,omitempty"`
	Problems  []string            `json:"problems,omitempty"` // what could not be gathered
	HandledIn string              `json:"handled_in"`
}

// CrashRuby is the Ruby side of a crashed process.
type CrashRuby struct {
	Version string   `json:"version"`
	Threads []Thread `json:"threads"`
}

// CrashNativeThread is one thread's registers and its native backtrace,
// unwound with the code's call frame information.
type CrashNativeThread struct {
	TID    int           `json:"tid"`
	PC     string        `json:"pc"`
	SP     string        `json:"sp"`
	Frames []NativeFrame `json:"frames"`
	// Error says why the unwind stopped before the outermost frame.
	Error string `json:"error,omitempty"`
}

// CrashProc is /proc/PID as it was during the crash.
type CrashProc struct {
	Maps    string            `json:"maps"`
	Status  string            `json:"status"`
	Limits  string            `json:"limits"`
	FDs     map[string]string `json:"fds"`
	Cgroup  string            `json:"cgroup"`
	Cwd     string            `json:"cwd"`
	Environ map[string]string `json:"environ"`
}

// CrashCore says what became of the core.
type CrashCore struct {
	File       string `json:"file,omitempty"` // core.zst in the crash directory
	Bytes      int64  `json:"bytes"`          // read from the kernel
	Stored     int64  `json:"stored_bytes"`   // compressed bytes kept
	Truncated  bool   `json:"truncated"`
	NotStored  string `json:"not_stored,omitempty"`
	ChainedTo  string `json:"chained_to,omitempty"`
	ChainError string `json:"chain_error,omitempty"`
}

// CrashNotification records one attempt to tell someone of the crash.
type CrashNotification struct {
	Kind  string `json:"kind"` // webhook, email
	To    string `json:"to"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// CrashList is the document `rbscope crash list --json` prints: the kept
// crashes, oldest first.
type CrashList struct {
	Crashes []CrashListRow `json:"crashes"`
}

// CrashListRow is one kept crash. A crash without a readable report has
// only its ID, and Signal says why.
type CrashListRow struct {
	ID           string `json:"id"`
	Time         string `json:"time"`
	PID          int    `json:"pid"`
	Signal       string `json:"signal"`
	Exe          string `json:"exe"`
	TopRubyFrame string `json:"top_ruby_frame"`
}

// CrashConfig is the crash handler's settings: the file `rbscope crash
// install` writes (/etc/rbscope/crash.json, or --config) and every
// `rbscope crash` command reads, and the config of `crash status --json`.
type CrashConfig struct {
	Dir     string `json:"dir"`
	Webhook string `json:"webhook,omitempty"`
	Email   string `json:"email,omitempty"`
	SMTP    string `json:"smtp,omitempty"`
	// MaxCoreBytes caps a stored core (uncompressed bytes read).
	MaxCoreBytes int64 `json:"max_core_bytes"`
	// KeepFreeBytes: no core is stored when the store's disk has less free.
	KeepFreeBytes int64 `json:"keep_free_bytes"`
	// MaxCrashes: the oldest crashes beyond this many are removed.
	MaxCrashes int `json:"max_crashes"`
	// Timeout bounds a whole handler run, as Go writes a duration ("1m0s").
	Timeout        string `json:"timeout"`
	InsecureNotify bool   `json:"insecure_notify,omitempty"`
	// PreviousPattern and PreviousPipeLimit are the kernel's settings
	// before the install, restored by uninstall.
	PreviousPattern   string `json:"previous_core_pattern"`
	PreviousPipeLimit string `json:"previous_core_pipe_limit"`
}

// CrashStatus is the document `rbscope crash status --json` prints: what
// is installed.
type CrashStatus struct {
	Installed     bool         `json:"installed"`
	CorePattern   string       `json:"core_pattern"`
	CorePipeLimit string       `json:"core_pipe_limit"`
	Config        *CrashConfig `json:"config,omitempty"`
	ConfigPath    string       `json:"config_path"`
	Crashes       int          `json:"crashes"`
}
