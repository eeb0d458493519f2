package network

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// The plain-HTTP side of the SNI/Host proxy: after the first request of
// a connection to port 80 is allowed, the client->upstream direction is
// parsed request by request and every request's Host goes through the
// same decision; each allowed request's bytes are forwarded unchanged
// (the head as read, the body by Content-Length or chunked framing).
// The upstream->client direction stays a byte copy.

// maxChunkLine bounds a chunk-size line of a chunked request body.
const maxChunkLine = 4096

// errHeadRead marks a head that could not be read (the connection ended
// or failed), as opposed to one read whole that does not parse.
var errHeadRead = errors.New("reading the request")

// readRequestHead reads one HTTP/1 request head (up to and including
// its empty line, at most maxHello bytes) from br and parses it. raw is
// every byte consumed. An error wrapping errHeadRead means the head was
// not read whole (io.EOF with an empty raw: the client ended cleanly
// between requests); any other error means it does not parse or its
// body framing is ambiguous.
func readRequestHead(br *bufio.Reader) ([]byte, *http.Request, error) {
	var raw []byte
	lines, partial := 0, false
	for {
		part, err := br.ReadSlice('\n')
		raw = append(raw, part...)
		if len(raw) > maxHello {
			return raw, nil, errors.New("request head too large")
		}
		if err == bufio.ErrBufferFull { // a long line: read on
			partial = true
			continue
		}
		if err != nil {
			if err == io.EOF && len(raw) == 0 {
				return raw, nil, io.EOF
			}
			return raw, nil, fmt.Errorf("%w: %w", errHeadRead, err)
		}
		empty := !partial && len(bytes.TrimRight(part, "\r\n")) == 0
		partial = false
		if empty && lines > 0 {
			break
		}
		lines++
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return raw, nil, fmt.Errorf("not an HTTP request: %w", err)
	}
	if len(req.TransferEncoding) > 0 && hasHeaderLine(raw, "Content-Length") {
		// net/http drops Content-Length for chunked; an upstream may not.
		return raw, nil, errors.New("request with both Transfer-Encoding and Content-Length")
	}
	return raw, req, nil
}

// hasHeaderLine reports whether a raw request head has a field name.
func hasHeaderLine(raw []byte, name string) bool {
	lines := strings.Split(string(raw), "\n")
	for _, l := range lines[1:] {
		if k, _, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
			return true
		}
	}
	return false
}

// requestName is the canonical name a request's Host (or absolute URI)
// carries, without the port.
func requestName(req *http.Request) string {
	if req == nil {
		return ""
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return CanonicalName(strings.Trim(host, "[]"))
}

// readHTTPHost reads an HTTP/1 request head and returns the bytes read
// and its Host without the port.
func readHTTPHost(r io.Reader) ([]byte, string, error) {
	raw, req, err := readRequestHead(bufio.NewReader(r))
	return raw, requestName(req), err
}

// switchesProtocol reports whether after req the connection stops
// being HTTP/1 requests: CONNECT, or an Upgrade (WebSocket, h2c).
func switchesProtocol(req *http.Request) bool {
	if req.Method == http.MethodConnect {
		return true
	}
	if req.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// relayEnd says how relayRequests stopped.
type relayEnd int

const (
	relayClosed relayEnd = iota // the client ended (or a read or write failed)
	relayDenied                 // a request was denied; nothing of it was forwarded
	relaySplice                 // the rest is not HTTP/1 requests: copy it as bytes
)

// relayRequests forwards the already read and allowed first request
// (head, req) and then each following request read from br to w,
// calling allow with every later request's name (or "" and the parse
// error) before forwarding it. It returns when the client ends, a
// request is denied, or the connection switches protocol (after
// forwarding that request, and for a later request that does not parse
// but is allowed, its bytes); then the caller copies the rest of br.
// n counts the requests forwarded.
func relayRequests(br *bufio.Reader, w io.Writer, head []byte, req *http.Request,
	allow func(name string, perr error) bool) (end relayEnd, n int, err error) {
	for {
		if err := forwardRequest(br, w, head, req); err != nil {
			return relayClosed, n, err
		}
		n++
		if switchesProtocol(req) {
			return relaySplice, n, nil
		}
		head, req, err = readRequestHead(br)
		if err == io.EOF {
			return relayClosed, n, nil
		}
		if errors.Is(err, errHeadRead) {
			return relayClosed, n, err
		}
		if !allow(requestName(req), err) {
			return relayDenied, n, nil
		}
		if err != nil { // allowed by the address rules without a Host
			if _, err := w.Write(head); err != nil {
				return relayClosed, n, err
			}
			return relaySplice, n, nil
		}
	}
}

// forwardRequest writes a request's head as read and then its body as
// framed (Content-Length or chunked, copied as is) from br to w.
func forwardRequest(br *bufio.Reader, w io.Writer, head []byte, req *http.Request) error {
	if _, err := w.Write(head); err != nil {
		return err
	}
	if len(req.TransferEncoding) > 0 { // "chunked": net/http accepts nothing else
		return forwardChunked(br, w)
	}
	if req.ContentLength > 0 {
		n, err := io.CopyN(w, br, req.ContentLength)
		if err != nil && n < req.ContentLength && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// forwardChunked copies a chunked body (chunks, the last chunk and the
// trailer section) from br to w unchanged, checking its framing.
func forwardChunked(br *bufio.Reader, w io.Writer) error {
	line := func() ([]byte, error) {
		l, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull || len(l) > maxChunkLine {
			return nil, errors.New("chunk line too long")
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return l, err
	}
	for {
		l, err := line()
		if err != nil {
			return err
		}
		size, _, _ := strings.Cut(strings.TrimRight(string(l), "\r\n"), ";")
		n, perr := strconv.ParseUint(strings.TrimRight(size, " \t"), 16, 62)
		if perr != nil {
			return fmt.Errorf("bad chunk size %q", size)
		}
		if _, err := w.Write(l); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(w, br, int64(n)); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		crlf := make([]byte, 2)
		if _, err := io.ReadFull(br, crlf); err != nil {
			return err
		}
		if string(crlf) != "\r\n" {
			return errors.New("chunk data not followed by CRLF")
		}
		if _, err := w.Write(crlf); err != nil {
			return err
		}
	}
	for total := 0; ; { // trailer fields, then the empty line
		l, err := line()
		if err != nil {
			return err
		}
		if total += len(l); total > maxHello {
			return errors.New("chunked trailer too large")
		}
		if _, err := w.Write(l); err != nil {
			return err
		}
		if len(bytes.TrimRight(l, "\r\n")) == 0 {
			return nil
		}
	}
}
