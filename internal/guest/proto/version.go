package proto

import "fmt"

// Version is the guest protocol version this build's agent speaks and
// reports in Info.Protocol. Raise it when a route, a body or a boot
// contract changes in a way an older side would not understand, and say
// in Versions what changed.
//
// Versions:
//
//	0: no protocol field in Info: every agent built before the protocol
//	   was versioned. Its routes and bodies are those of version 1, so
//	   this daemon serves it unchanged.
//	1: Info.Protocol; the routes of Routes.
const Version = 1

// MinVersion is the oldest agent protocol this build's daemon serves. A
// sandbox whose agent speaks an older one, or a newer one than Version
// (a daemon downgraded under it), keeps running but is refused guest
// requests until it is destroyed and created again with this daemon's
// agent.
const MinVersion = 0

// Info is the agent's answer to Ping.
type Info struct {
	// Version is the agent's build (internal/version).
	Version string `json:"version"`
	// Protocol is the guest protocol version it speaks; 0 (absent) for
	// agents built before it was reported.
	Protocol int    `json:"protocol,omitempty"`
	Pid      int    `json:"pid"`
	Uptime   string `json:"uptime"`
}

// Supported says whether this daemon serves an agent that answered info,
// and if not, why, in words for the sandbox's record and the log.
func Supported(info Info) error {
	if info.Protocol < MinVersion || info.Protocol > Version {
		build := info.Version
		if build == "" {
			build = "unknown"
		}
		return fmt.Errorf("its guest agent (build %s) speaks guest protocol %d, and this daemon serves %d to %d: destroy the sandbox and create it again to get this daemon's agent", build, info.Protocol, MinVersion, Version)
	}
	return nil
}
