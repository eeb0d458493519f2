package mcpserver

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/version"
)

// BridgeStdio is ServeStdio of the streamable HTTP endpoint at endpoint,
// reached with hc: what `agentbox mcp` and `agentbox mcp host --stdio` run.
func BridgeStdio(ctx context.Context, endpoint string, hc *http.Client, in io.ReadCloser, out io.WriteCloser) error {
	return ServeStdio(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, in, out)
}

// ServeStdio connects to the MCP server at upstream and offers its tools
// as a server on in and out (a client that launches a command speaks MCP
// on its stdin and stdout), until in ends or ctx does.
func ServeStdio(ctx context.Context, upstream mcp.Transport, in io.ReadCloser, out io.WriteCloser) error {
	var p *Proxy
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-cli", Version: version.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
			if p != nil {
				_ = p.Refresh(ctx)
			}
		},
	})
	cs, err := cl.Connect(ctx, upstream, nil)
	if err != nil {
		return fmt.Errorf("connecting to the MCP endpoint: %w", err)
	}
	defer cs.Close()
	init := cs.InitializeResult()
	impl := &mcp.Implementation{Name: ServerName, Version: version.Version}
	instructions := ""
	if init != nil {
		instructions = init.Instructions
		if init.ServerInfo != nil {
			impl = init.ServerInfo
		}
	}
	p = NewProxy(impl, instructions, "", nil)
	if err := p.SetUpstream(ctx, cs); err != nil {
		return err
	}
	err = p.Server.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if ctx.Err() != nil || err == io.EOF {
		return nil
	}
	return err
}
