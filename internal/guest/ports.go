package guest

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// handleDial serves proto.Dial.Path: it connects to 127.0.0.1:{port}
// (then [::1]) in the sandbox's network namespace, answers 101 and relays
// bytes both ways until either side closes. This is how the daemon's
// preview proxy reaches a server that listens on loopback only.
func (s *Server) handleDial(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		s.writeError(w, errdefs.Invalid("port must be 1-65535, got %q", r.PathValue("port")))
		return
	}
	if r.Header.Get("Upgrade") != proto.DialProtocol {
		s.writeError(w, errdefs.Invalid("send Connection: Upgrade and Upgrade: %s", proto.DialProtocol))
		return
	}
	var up net.Conn
	for _, host := range []string{"127.0.0.1", "::1"} {
		up, err = net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
		if err == nil {
			break
		}
	}
	if err != nil {
		s.writeError(w, errdefs.Unavailable("nothing answers on port %d in the sandbox: %v; start a server that listens on it", port, err))
		return
	}
	defer up.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.log.Warn("dial: taking over the connection", "err", err)
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto.DialProtocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	relay(conn, brw.Reader, up)
}

// relay copies a->b (starting with what was buffered from a) and b->a.
// When one direction ends it half-closes the other side's write, so that
// a client's EOF reaches the server; both close when both are done.
func relay(a net.Conn, buffered io.Reader, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(b, buffered)
		closeWrite(b)
	}()
	io.Copy(a, b)
	closeWrite(a)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
