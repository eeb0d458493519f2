package integration

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/bench"
)

// The clients lines of `agentbox bench` (the CLI's start and exec, the
// Python SDK's create and exec) and the stream's throughput lines with
// their floor run against the test daemon, a few samples each, every
// sample without error, and each is judged against its budget.
func TestBenchClientsAndStreamLines(t *testing.T) {
	tpls, err := env.client.ListTemplates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream := "busybox"
	for _, tp := range tpls {
		if tp.Name == "base" {
			stream = "base" // the stream lines prefer it (GNU coreutils' head)
		}
	}
	o := bench.Options{
		Templates: []string{"busybox", stream},
		Clients: bench.ClientOptions{CLI: env.cliBin, PythonSDK: filepath.Join(env.repo, "sdk/python"),
			Host: "unix://" + env.cfg.Socket, Key: env.key},
	}
	rep := benchLinesWith(t, o, `^(clients/|exec-stream/stdout|exec/true$|create/busybox$|baseline/fork-exec$)`, 5, 5*time.Minute, []string{
		"clients/cli --help", "clients/cli exec true", "clients/python-sdk create (busybox)", "clients/python-sdk exec true",
		"exec-stream/stdout floor (20 MiB, " + stream + ")", "exec-stream/stdout (20 MiB, " + stream + ")",
		"exec-stream/stdout (20 MiB, " + stream + ", ndjson)",
	})
	var judged []string
	for _, b := range rep.Budgets {
		judged = append(judged, b.What)
	}
	for _, want := range []string{"CLI `agentbox --help` p50", "CLI `agentbox exec ID -- true` p50",
		"Python SDK create p50 within +3 ms of the Go client's (create/busybox)",
		"Python SDK exec p50 within +0.5 ms of the Go client's (exec/true)",
		"exec-stream/stdout (20 MiB, " + stream + ") MB/s"} {
		if !slices.Contains(judged, want) {
			t.Errorf("no budget line %q; have %q", want, judged)
		}
	}
}
