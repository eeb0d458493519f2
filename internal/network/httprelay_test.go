package network

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// relayString runs relayRequests over in as the client's bytes after
// reading its first head, allowing the names in allowed, and returns
// what went upstream, how it ended, the names asked (a parse error as
// "!"), and the bytes left unread.
func relayString(t *testing.T, in string, allowed ...string) (up string, end relayEnd, asked []string, rest string, err error) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(in))
	head, req, herr := readRequestHead(br)
	if herr != nil {
		t.Fatalf("first head of %q: %v", in, herr)
	}
	var out bytes.Buffer
	end, _, err = relayRequests(br, &out, head, req, func(name string, perr error) bool {
		if perr != nil {
			asked = append(asked, "!"+name)
			return false
		}
		asked = append(asked, name)
		for _, a := range allowed {
			if a == name {
				return true
			}
		}
		return false
	})
	r, _ := io.ReadAll(br)
	return out.String(), end, asked, string(r), err
}

func TestGuardHTTPRelay(t *testing.T) {
	get := func(host string) string { return "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n" }
	post := func(host, body string) string {
		return "POST /x HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	smuggled := get("denied.test")
	chunked := "POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;ext=1\r\nhello\r\n" + "1a\r\n" + strings.Repeat("z", 26) + "\r\n0\r\nX-Trailer: 1\r\n\r\n"
	for _, tt := range []struct {
		name, in string
		allowed  []string
		wantUp   string // "" means in
		wantEnd  relayEnd
		asked    string
		rest     string
	}{
		{name: "two allowed", in: get("a.test") + get("A.test:80"), allowed: []string{"a.test"},
			wantEnd: relayClosed, asked: "a.test"},
		{name: "allowed then denied", in: get("a.test") + post("denied.test", "secret"), allowed: []string{"a.test"},
			wantUp: get("a.test"), wantEnd: relayDenied, asked: "denied.test", rest: "secret"},
		{name: "chunked body", in: chunked + get("b.test"), allowed: []string{"a.test", "b.test"},
			wantEnd: relayClosed, asked: "b.test"},
		{name: "pipelined, a request in a body is data", in: post("a.test", smuggled) + get("b.test") + get("a.test"),
			allowed: []string{"a.test", "b.test"}, wantEnd: relayClosed, asked: "b.test a.test"},
		{name: "pipelined, the third denied", in: get("a.test") + get("a.test") + get("denied.test") + get("a.test"),
			allowed: []string{"a.test"}, wantUp: get("a.test") + get("a.test"), wantEnd: relayDenied,
			asked: "a.test denied.test", rest: get("a.test")},
		{name: "absolute URI wins over Host", in: get("a.test") + "GET http://denied.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
			allowed: []string{"a.test"}, wantUp: get("a.test"), wantEnd: relayDenied, asked: "denied.test"},
		{name: "websocket upgrade splices", allowed: []string{"a.test"},
			in:     "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n" + smuggled,
			wantUp: "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n",
			// the rest is the new protocol's: not parsed, not asked
			wantEnd: relaySplice, asked: "", rest: smuggled},
		{name: "Upgrade without Connection: upgrade stays HTTP", allowed: []string{"a.test"},
			in:      "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n" + smuggled,
			wantUp:  "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\n",
			wantEnd: relayDenied, asked: "denied.test"},
		{name: "CONNECT splices", in: "CONNECT a.test:80 HTTP/1.1\r\nHost: a.test:80\r\n\r\n" + smuggled,
			allowed: []string{"a.test"}, wantUp: "CONNECT a.test:80 HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
			wantEnd: relaySplice, rest: smuggled},
		{name: "ambiguous framing is a parse error", allowed: []string{"a.test"},
			in:     get("a.test") + "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			wantUp: get("a.test"), wantEnd: relayDenied, asked: "!", rest: "0\r\n\r\n"},
		{name: "not HTTP after the first", in: get("a.test") + "\x16\x03\x01 not http\r\n\r\n", allowed: []string{"a.test"},
			wantUp: get("a.test"), wantEnd: relayDenied, asked: "!"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up, end, asked, rest, err := relayString(t, tt.in, tt.allowed...)
			want := tt.wantUp
			if want == "" {
				want = tt.in
			}
			if err != nil || up != want || end != tt.wantEnd || strings.Join(asked, " ") != tt.asked || rest != tt.rest {
				t.Errorf("got up %q end %d asked %q rest %q err %v\nwant up %q end %d asked %q rest %q",
					up, end, asked, rest, err, want, tt.wantEnd, tt.asked, tt.rest)
			}
		})
	}
}

func TestGuardHTTPRelayErrors(t *testing.T) {
	allow := func(string, error) bool { return true }
	for in, want := range map[string]string{
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n":              "bad chunk size",
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n": "not followed by CRLF",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 10\r\n\r\nshort":                       "unexpected EOF",
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.t":                        "reading the request",
	} {
		br := bufio.NewReader(strings.NewReader(in))
		head, req, err := readRequestHead(br)
		if err != nil {
			t.Fatal(err)
		}
		end, _, err := relayRequests(br, io.Discard, head, req, allow)
		if end != relayClosed || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: end %d, %v; want an error with %q", in, end, err, want)
		}
	}
	// A head over maxHello, and a clean end between requests.
	big := "GET / HTTP/1.1\r\nHost: a.test\r\nX: " + strings.Repeat("a", maxHello) + "\r\n\r\n"
	if _, _, err := readRequestHead(bufio.NewReader(strings.NewReader(big))); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a %d-byte head: %v", len(big), err)
	}
	if _, _, err := readRequestHead(bufio.NewReader(strings.NewReader(""))); !errors.Is(err, io.EOF) {
		t.Errorf("no bytes: %v, want io.EOF", err)
	}
	// A header line longer than the reader's buffer is read whole.
	long := "GET / HTTP/1.1\r\nX-Long: " + strings.Repeat("b", 10000) + "\r\nHost: a.test\r\n\r\n"
	raw, req, err := readRequestHead(bufio.NewReader(strings.NewReader(long)))
	if err != nil || string(raw) != long || requestName(req) != "a.test" {
		t.Errorf("a long header line: %v, name %q", err, requestName(req))
	}
}
