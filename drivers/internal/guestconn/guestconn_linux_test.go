package guestconn

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/driver"
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
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if err := Ping(context.Background(), sock); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	c, err := Dial(context.Background(), &driver.Handle{ID: "x", Socket: sock})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c.Close()
	if err := Ping(context.Background(), sock+".missing"); err == nil {
		t.Fatal("Ping of a missing socket succeeded")
	}
	if _, err := Dial(context.Background(), &driver.Handle{ID: "x", Socket: sock + ".missing"}); err == nil {
		t.Fatal("Dial of a missing socket succeeded")
	}
}
