// Package guestconn holds what every isolation driver needs to reach a
// guest agent over a unix socket and to tell whether a sandbox's init still
// runs: one place, so the tiers cannot drift apart.
package guestconn

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guestclient"
)

// Ping asks the guest listening on sock who it is (proto.Ping), on a
// connection of its own. It accepts any protocol version: Adopt uses it to
// tell a live agent, and the service decides what it serves.
func Ping(ctx context.Context, sock string) (proto.Info, error) {
	return guestclient.Unix(sock).Ping(ctx)
}

// Ready is Ping for an agent the driver just started or restored: one
// whose protocol version this daemon does not serve (proto.Supported) is
// an errdefs.Precondition error, which waiting longer cannot cure.
func Ready(ctx context.Context, sock string) error {
	info, err := Ping(ctx, sock)
	if err != nil {
		return err
	}
	if err := proto.Supported(info); err != nil {
		return errdefs.Precondition("the guest agent answered, but %v", err)
	}
	return nil
}

// Dial opens a connection to h's guest socket.
func Dial(ctx context.Context, h *driver.Handle) (net.Conn, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return nil, errdefs.Unavailable("sandbox %s: guest agent unreachable: %v", h.ID, err)
	}
	return c, nil
}

// Alive reports whether h's init still runs: the same pid with the same
// start time, so that a recycled pid is never mistaken for the sandbox.
func Alive(h *driver.Handle) bool {
	st, err := PidStartTime(h.Pid)
	return err == nil && (h.PidStart == 0 || st == h.PidStart)
}

// PidStartTime reads field 22 of /proc/PID/stat (start time in ticks).
func PidStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	// After ")" the first field is field 3 (state); start time is field 22.
	return strconv.ParseUint(f[19], 10, 64)
}

// WatchExit returns a channel closed when process pid exits, watched with
// a pidfd (so it works for processes that are not our children, such as
// sandboxes adopted after a daemon restart). If the pidfd cannot be
// opened the process is taken as gone: the channel is closed and the
// error says why.
func WatchExit(pid int) (chan struct{}, error) {
	ch := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		close(ch)
		return ch, err
	}
	go func() {
		defer unix.Close(fd)
		defer close(ch)
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
			if err != unix.EINTR {
				return
			}
		}
	}()
	return ch, nil
}
