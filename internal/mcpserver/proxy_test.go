package mcpserver

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoArgs struct {
	Text string `json:"text"`
}

// upstream starts an MCP server with an echo tool (and a fail tool) and
// returns a client session to it over in-memory transports.
func upstream(t *testing.T, tag string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	s := mcp.NewServer(&mcp.Implementation{Name: "up"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		return text("%s:%s", tag, in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "fails"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return failed("no"), nil, nil
	})
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "proxy"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// downstream connects a client to p.
func downstream(t *testing.T, p *Proxy) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := p.Server.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func resultText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.(*mcp.TextContent).Text)
	}
	return b.String()
}

func TestProxy(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var calls []Call
	p := NewProxy(&mcp.Implementation{Name: "hosted"}, "", "fs", func(_ context.Context, _ *mcp.CallToolRequest, c Call) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	})
	down := downstream(t, p)

	// Before an upstream: no tools.
	res, err := down.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 0 {
		t.Fatalf("tools before an upstream = %v, %v", res, err)
	}
	if err := p.SetUpstream(ctx, upstream(t, "one")); err != nil {
		t.Fatal(err)
	}
	r, err := down.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || r.IsError || resultText(t, r) != "one:hi" {
		t.Fatalf("echo through the proxy = %+v, %v", r, err)
	}
	r, err = down.CallTool(ctx, &mcp.CallToolParams{Name: "fail"})
	if err != nil || !r.IsError {
		t.Fatalf("fail through the proxy = %+v, %v; want a tool error", r, err)
	}

	// Between upstreams a call says why, as a tool error.
	p.ClearUpstream("it crashed")
	r, err = down.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || !r.IsError || !strings.Contains(resultText(t, r), "it crashed") {
		t.Fatalf("echo without an upstream = %+v, %v", r, err)
	}
	// A new upstream serves the same session.
	if err := p.SetUpstream(ctx, upstream(t, "two")); err != nil {
		t.Fatal(err)
	}
	r, err = down.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || resultText(t, r) != "two:hi" {
		t.Fatalf("echo after a new upstream = %+v, %v", r, err)
	}
	if _, err := down.CallTool(ctx, &mcp.CallToolParams{Name: "nope"}); err == nil {
		t.Error("an unknown tool answered")
	}

	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		tool, outcome string
	}{{"echo", OutcomeOK}, {"fail", OutcomeToolError}, {"echo", OutcomeToolError}, {"echo", OutcomeOK}, {"nope", OutcomeError}}
	if len(calls) != len(want) {
		t.Fatalf("audited %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		if c := calls[i]; c.Server != "fs" || c.Tool != w.tool || c.Outcome != w.outcome {
			t.Errorf("call %d = %+v, want %s %s", i, c, w.tool, w.outcome)
		}
	}
	if calls[0].ArgBytes != len(`{"text":"hi"}`) {
		t.Errorf("arg bytes = %d", calls[0].ArgBytes)
	}
}

func TestParseMB(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{{"512", 512, true}, {"512M", 512, true}, {"2G", 2048, true}, {"1GiB", 1024, true}, {"256mb", 256, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5G", 0, false}, {"lots", 0, false}} {
		got, err := parseMB(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseMB(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
