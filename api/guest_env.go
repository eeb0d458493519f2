package api

// GuestEnvPath is the guest protocol's route that replaces the default
// environment of later execs (PUT, body GuestEnv, answer 204). Only the
// daemon reaches it: the public API forwards just the exec, file, process
// and PTY routes. A warm pool sandbox gets its request's env through it
// when it is handed out (docs/PERFORMANCE.md, "Warm pools").
const GuestEnvPath = "/env"

// GuestEnv is the body of PUT GuestEnvPath: KEY=VALUE entries, the
// template's defaults merged with the sandbox's env, sorted by key.
type GuestEnv struct {
	Env []string `json:"env"`
}
