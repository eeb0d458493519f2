package guestconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

func TestPidStartTimeAndAlive(t *testing.T) {
	st, err := PidStartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("PidStartTime(self) = %d, %v", st, err)
	}
	if !Alive(&driver.Handle{Pid: os.Getpid(), PidStart: st}) {
		t.Fatal("this process is not alive")
	}
	if Alive(&driver.Handle{Pid: os.Getpid(), PidStart: st + 1}) {
		t.Fatal("a different start time must not count as the same process")
	}
	if Alive(&driver.Handle{Pid: 1 << 30}) {
		t.Fatal("a pid that does not exist is alive")
	}
}

func TestPingAndDial(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "g.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ping" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"version":"v9","protocol":1,"pid":1}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	info, err := Ping(context.Background(), sock)
	if err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if info.Version != "v9" || info.Protocol != 1 {
		t.Errorf("Ping answered %+v, want version v9, protocol 1", info)
	}
	c, err := Dial(context.Background(), &driver.Handle{ID: "x", Socket: sock})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c.Close()
	if _, err := Ping(context.Background(), sock+".missing"); err == nil {
		t.Fatal("Ping of a missing socket succeeded")
	}
	if _, err := Dial(context.Background(), &driver.Handle{ID: "x", Socket: sock + ".missing"}); err == nil {
		t.Fatal("Dial of a missing socket succeeded")
	}
}

// TestReadyChecksTheProtocol: an agent that speaks a protocol this
// daemon serves is ready (one from before versioning answers no
// protocol: version 0); one that speaks a newer one is refused for good,
// with the versions in the message.
func TestReadyChecksTheProtocol(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		ok     bool
	}{
		{"current", fmt.Sprintf(`{"version":"v2","protocol":%d,"pid":1}`, proto.Version), true},
		{"before versioning", `{"version":"v1","pid":1,"uptime":"1s"}`, true},
		{"newer than this daemon", fmt.Sprintf(`{"version":"v3","protocol":%d,"pid":1}`, proto.Version+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "g.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(tt.answer))
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			err = Ready(context.Background(), sock)
			if tt.ok {
				if err != nil {
					t.Fatalf("Ready: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("Ready = %v, want a failed precondition", err)
			}
			if want := fmt.Sprintf("speaks guest protocol %d", proto.Version+1); !strings.Contains(err.Error(), want) {
				t.Errorf("Ready = %q, want it to say %q", err, want)
			}
		})
	}
}
