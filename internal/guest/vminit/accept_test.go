package vminit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/agentbox/agentbox/internal/guest/proto"
)

// fakePort is the agent's port: what the host wrote, then errEnd (a
// real port would read EOF until the next host connects).
type fakePort struct {
	in  *bytes.Reader
	out bytes.Buffer
}

var errEnd = errors.New("the host wrote nothing more")

func (p *fakePort) Read(b []byte) (int, error) {
	if p.in.Len() == 0 {
		return 0, errEnd
	}
	return p.in.Read(b)
}

func (p *fakePort) Write(b []byte) (int, error) { return p.out.Write(b) }

// TestAccept checks that the agent finds the host's hello whatever an
// earlier connection left on the port before it, acks that hello by its
// nonce, and consumes nothing after its line (the multiplexer's).
func TestAccept(t *testing.T) {
	hello := func(nonce string) string {
		b, _ := json.Marshal(proto.VMHello{Nonce: nonce, Pids: 9})
		return proto.VMHelloPrefix + string(b) + "\n"
	}
	frame := "\x00\x01\x00\x02\x00\x00\x00\x01\x00\x00\x00\x05ABCDE" // a yamux frame, no newline
	tests := []struct {
		name, in, want string
	}{
		{"alone", hello("n1"), "n1"},
		{"after an old session's frame on its line", frame + hello("n2"), "n2"},
		{"after the tail of a hello a session read", `99,"net":null}` + "\n" + hello("n3"), "n3"},
		{"after a cut hello on its line", hello("n4")[:30] + hello("n5"), "n5"},
		{"after a line that is not one", "Hello\n\n" + hello("n6"), "n6"},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := "\x00mux"
			p := &fakePort{in: bytes.NewReader([]byte(tt.in + after))}
			got, err := accept(p, log)
			if err != nil {
				t.Fatal(err)
			}
			if got.Nonce != tt.want || got.Pids != 9 {
				t.Errorf("hello: got %+v, want nonce %q", got, tt.want)
			}
			if ack, want := p.out.String(), proto.VMAckFor(tt.want); ack != want {
				t.Errorf("wrote %q, want %q", ack, want)
			}
			if rest, _ := io.ReadAll(p.in); string(rest) != after {
				t.Errorf("left %q on the port, want %q", rest, after)
			}
		})
	}
	t.Run("no hello", func(t *testing.T) {
		p := &fakePort{in: bytes.NewReader([]byte(frame + "\n" + hello("n7")[5:]))}
		if got, err := accept(p, log); !errors.Is(err, errEnd) {
			t.Errorf("got %+v, %v; want no hello", got, err)
		}
		if p.out.Len() != 0 {
			t.Errorf("acked with %q", p.out.String())
		}
	})
}
