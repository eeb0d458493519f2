// Package version holds the build's version string, set with
// -ldflags "-X github.com/agentbox/agentbox/internal/version.Version=...".
package version

// Version of this build.
var Version = "0.1.0-dev"
