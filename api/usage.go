package api

import "time"

// UsageSample is one sample of a sandbox's resource use (GET
// /v1/sandboxes/{id}/metrics), read from the host's counters.
type UsageSample struct {
	Time time.Time `json:"time"`
	// CPUSeconds is the CPU time used since the sandbox started;
	// CPUPercent the use over the interval before this sample, 100 being
	// one core busy.
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUPercent  float64 `json:"cpu_percent"`
	MemoryBytes int64   `json:"memory_bytes"` // page cache included
	DiskBytes   int64   `json:"disk_bytes"`   // the writable layer
	// RxBytes and TxBytes are the bytes the sandbox received and sent on
	// its network interface (0 with egress none).
	RxBytes int64 `json:"rx_bytes"`
	TxBytes int64 `json:"tx_bytes"`
	Pids    int64 `json:"pids"`
}

// SandboxMetrics is a sandbox's recent resource use, oldest sample first:
// one every IntervalSeconds, the last hour kept.
type SandboxMetrics struct {
	Sandbox         string        `json:"sandbox"`
	IntervalSeconds float64       `json:"interval_seconds"`
	Limits          Resources     `json:"limits"`
	Samples         []UsageSample `json:"samples"`
}
