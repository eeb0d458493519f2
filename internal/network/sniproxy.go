package network

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// The SNI/Host proxy: for a sandbox with domain rules the firewall
// redirects TCP to ports 80 and 443 to this listener on its gateway. It
// reads the TLS ClientHello's server name (443) or the HTTP request's
// Host (80), lets the connection through only if that name is allowed
// AND the original destination (SO_ORIGINAL_DST) passes the address
// rules or was resolved for an allowed name, then dials the destination
// from the host and splices; otherwise it closes the connection (an HTTP
// client gets a 403 first). On port 80 every request of a kept-alive
// connection is checked the same way (relayHTTP, httprelay.go); of TLS
// only the handshake is visible.

// helloTimeout bounds the wait for the ClientHello or request head.
const helloTimeout = 10 * time.Second

// maxHello bounds what the proxy reads before deciding.
const maxHello = 64 << 10

func newConn() (*nftables.Conn, error) { return nftables.New() }

// serveProxy accepts until ln closes; each connection's goroutine ends
// with it, or when closeConns closes it.
func (g *guard) serveProxy(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go g.proxyConn(c.(*net.TCPConn))
	}
}

// track registers an open connection for closeConns; the returned func
// forgets it. It fails once the guard has stopped, or when maxProxyConns
// sandbox-side connections are open.
func (g *guard) track(c net.Conn) (func(), bool) {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	if g.conns == nil || len(g.conns) >= 2*maxProxyConns {
		return nil, false
	}
	g.conns[c] = struct{}{}
	return func() {
		g.cmu.Lock()
		delete(g.conns, c)
		g.cmu.Unlock()
	}, true
}

// closeConns closes every proxied connection (the sandbox's network is
// going away) and refuses new ones.
func (g *guard) closeConns() {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	for c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// proxyConn checks and splices one redirected connection.
func (g *guard) proxyConn(c *net.TCPConn) {
	defer c.Close()
	e := api.EgressLogEntry{Kind: api.EgressKindConnect, Proto: "tcp"}
	deny := func(reason string) {
		e.Verdict, e.Reason = api.VerdictDeny, reason
		g.record(e)
	}
	untrack, ok := g.track(c)
	if !ok {
		deny(fmt.Sprintf("more than %d connections through the proxy", maxProxyConns))
		return
	}
	defer untrack()
	dst, err := originalDst(c)
	if err != nil {
		deny("no original destination: " + err.Error())
		return
	}
	e.Dest = dst.String()
	if src, ok := addrOf(c.RemoteAddr()); !ok || src != g.sub.Addr {
		deny("connection from " + c.RemoteAddr().String() + ", not the sandbox's address")
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	var head []byte
	var name string
	var br *bufio.Reader // port 80: the client's bytes after head
	var req *http.Request
	if dst.Port() == 443 {
		head, name, err = readClientHello(c)
	} else {
		br = bufio.NewReader(c)
		head, req, err = readRequestHead(br)
		name = requestName(req)
	}
	_ = c.SetReadDeadline(time.Time{})
	e.Name = name
	if _, perr := netip.ParseAddr(name); perr == nil {
		name = "" // an address literal names nothing: the address rules decide
	}
	reason, ok := g.decide(dst, name, err)
	if !ok {
		deny(reason)
		if dst.Port() == 80 && len(head) > 0 {
			fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nagentbox egress policy: %s\n", reason)
		}
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.Dial("tcp4", dst.String())
	if err != nil {
		deny(reason + "; dialing: " + err.Error())
		return
	}
	defer up.Close()
	untrackUp, ok := g.track(up)
	if !ok {
		return
	}
	defer untrackUp()
	e.Verdict, e.Reason = api.VerdictAllow, reason
	g.record(e)
	if req != nil {
		g.relayHTTP(c, up.(*net.TCPConn), br, head, req, dst, e)
		return
	}
	if br != nil { // not HTTP, allowed by the address rules
		head = append(head, peekBuffered(br)...)
	}
	if _, err := up.Write(head); err != nil {
		return
	}
	splice(c, up.(*net.TCPConn))
}

// peekBuffered returns (and consumes) what br holds already read.
func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	out := append([]byte(nil), b...)
	_, _ = br.Discard(len(out))
	return out
}

// relayHTTP carries a plain-HTTP connection whose first request (head,
// req) was allowed: every later request's Host is decided like the
// first's (same name rules, same original destination) before its bytes
// go upstream, while responses are copied back as bytes. A denied
// request is logged and ends the connection: the upstream's write side
// is closed, responses to the requests before it are let through (for
// up to helloTimeout), then the client gets a 403 and both sides close.
// An allowed CONNECT or Upgrade request turns the rest into a splice.
func (g *guard) relayHTTP(c, up *net.TCPConn, br *bufio.Reader, head []byte, req *http.Request,
	dst netip.AddrPort, e api.EgressLogEntry) {
	var mu sync.Mutex
	denying := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(c, up)
		mu.Lock()
		if !denying {
			_ = c.CloseWrite()
		}
		mu.Unlock()
	}()
	var denied string
	logged := e.Name
	end, _, _ := relayRequests(br, up, head, req, func(name string, perr error) bool {
		e.Name = name
		if _, err := netip.ParseAddr(name); err == nil {
			name = ""
		}
		reason, ok := g.decide(dst, name, perr)
		if !ok {
			e.Verdict, e.Reason = api.VerdictDeny, reason+" (a later request on a kept-alive connection)"
			g.record(e)
			denied = reason
			return false
		}
		if e.Name != logged { // each new name allowed once per connection
			e.Verdict, e.Reason = api.VerdictAllow, reason
			g.record(e)
			logged = e.Name
		}
		return true
	})
	switch end {
	case relaySplice:
		if rest := peekBuffered(br); len(rest) > 0 {
			if _, err := up.Write(rest); err != nil {
				return
			}
		}
		_, _ = io.Copy(up, c)
		_ = up.CloseWrite()
		<-done
	case relayDenied:
		mu.Lock()
		denying = true
		mu.Unlock()
		_ = up.CloseWrite()
		select {
		case <-done:
			fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nagentbox egress policy: %s\n", denied)
		case <-time.After(helloTimeout):
		}
	default:
		_ = up.CloseWrite()
		<-done
	}
}

// decide applies the policy to a connection to dst carrying name (or
// none, with herr saying why).
func (g *guard) decide(dst netip.AddrPort, name string, herr error) (string, bool) {
	pol := g.policy()
	if isLocal(dst.Addr()) {
		return "the host's own address", false
	}
	av, areason := pol.Addr(dst.Addr(), dst.Port(), g.m.pool.base)
	if av == AddrBlocked || av == AddrDenied {
		return areason, false
	}
	if name == "" {
		why := "no TLS server name"
		if dst.Port() != 443 {
			why = "no HTTP Host"
		}
		if herr != nil {
			why += " (" + herr.Error() + ")"
		}
		if av == AddrAllowed || av == AddrDefault && pol.Egress == api.EgressInternet {
			return why + "; " + areason, true
		}
		return why + " and the address is not allowed by a CIDR rule", false
	}
	ok, nreason := pol.NameVerdict(name)
	if !ok {
		return nreason, false
	}
	if av == AddrAllowed || av == AddrDefault && pol.Egress == api.EgressInternet {
		return nreason + "; " + areason, true
	}
	if n, ok := g.resolvedFor(dst.Addr()); ok {
		return nreason + "; address resolved for " + n, true
	}
	return "address not resolved for an allowed name", false
}

// isLocal reports whether a is one of the host's own addresses.
func isLocal(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, x := range addrs {
		if ipn, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return a.IsLoopback() || a.IsUnspecified()
}

// originalDst returns a redirected connection's destination before the
// redirect (SO_ORIGINAL_DST, IPv4).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		// The kernel writes a sockaddr_in (16 bytes); IPv6Mreq is a
		// 20-byte buffer getsockopt can fill.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
	})
	if err == nil {
		err = serr
	}
	return out, err
}

// readClientHello reads a TLS ClientHello (which may span records) and
// returns the bytes read and its server name.
func readClientHello(r io.Reader) ([]byte, string, error) {
	var raw, hs []byte
	for {
		var h [5]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return raw, "", fmt.Errorf("reading a TLS record: %w", err)
		}
		raw = append(raw, h[:]...)
		if h[0] != 0x16 {
			return raw, "", errors.New("not a TLS handshake")
		}
		n := int(binary.BigEndian.Uint16(h[3:5]))
		if len(raw)+n > maxHello {
			return raw, "", errors.New("ClientHello too large")
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return raw, "", fmt.Errorf("reading a TLS record: %w", err)
		}
		raw = append(raw, body...)
		hs = append(hs, body...)
		if len(hs) >= 4 {
			if hs[0] != 1 {
				return raw, "", errors.New("not a ClientHello")
			}
			if need := 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])); len(hs) >= need {
				name, err := parseClientHello(hs[4:need])
				return raw, name, err
			}
		}
	}
}

// parseClientHello returns the host_name of a ClientHello body's
// server_name extension ("" when it has none).
func parseClientHello(b []byte) (string, error) {
	bad := errors.New("malformed ClientHello")
	skip := func(n int) bool {
		if len(b) < n {
			return false
		}
		b = b[n:]
		return true
	}
	vec := func(lenBytes int) ([]byte, bool) {
		if len(b) < lenBytes {
			return nil, false
		}
		n := 0
		for i := 0; i < lenBytes; i++ {
			n = n<<8 | int(b[i])
		}
		if len(b) < lenBytes+n {
			return nil, false
		}
		v := b[lenBytes : lenBytes+n]
		b = b[lenBytes+n:]
		return v, true
	}
	if !skip(2 + 32) { // version, random
		return "", bad
	}
	for _, lb := range []int{1, 2, 1} { // session id, cipher suites, compression
		if _, ok := vec(lb); !ok {
			return "", bad
		}
	}
	if len(b) == 0 {
		return "", nil // no extensions
	}
	exts, ok := vec(2)
	if !ok {
		return "", bad
	}
	for len(exts) >= 4 {
		typ := binary.BigEndian.Uint16(exts[0:2])
		n := int(binary.BigEndian.Uint16(exts[2:4]))
		if len(exts) < 4+n {
			return "", bad
		}
		data := exts[4 : 4+n]
		exts = exts[4+n:]
		if typ != 0 { // server_name
			continue
		}
		if len(data) < 2 {
			return "", bad
		}
		list := data[2:]
		for len(list) >= 3 {
			kind := list[0]
			l := int(binary.BigEndian.Uint16(list[1:3]))
			if len(list) < 3+l {
				return "", bad
			}
			if kind == 0 {
				return CanonicalName(string(list[3 : 3+l])), nil
			}
			list = list[3+l:]
		}
		return "", nil
	}
	return "", nil
}

// splice copies both ways until both directions end, passing half-closes.
func splice(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(b, a)
		_ = b.CloseWrite()
	}()
	_, _ = io.Copy(a, b)
	_ = a.CloseWrite()
	wg.Wait()
}
