package sandbox

import (
	"context"
	"strings"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/store"
)

// A daemon upgraded (or downgraded) under live sandboxes re-adopts them
// with the agents they were booted with. Each adopted sandbox's agent is
// asked its protocol version (proto.Info): one this daemon serves
// (proto.Supported) is served as before; one it does not keeps running,
// is refused guest requests with a message that says to restart it, and
// its record's error says the same (`agentbox info`), as does the log.
// A sandbox this daemon booted needs no check: its driver checked the
// agent when it came up (guestconn.Ready).

// guestRefusedPrefix starts the record's error of a sandbox whose agent
// this daemon does not serve, so that a later check can clear it.
const guestRefusedPrefix = "needs a restart: "

// guestCheck is what the version check found for one init (h): a reset
// gives the sandbox a new init, the daemon's own agent, which it no
// longer applies to.
type guestCheck struct {
	h *driver.Handle
	// pending: not asked yet (adopted paused, its agent frozen): the
	// first guest request asks.
	pending bool
	// refused is why this daemon does not serve the agent; nil: served.
	refused error
}

// checkAdoptedGuest asks the agent of e, just adopted, which protocol it
// speaks, and records the answer (see above). A paused sandbox's agent
// cannot answer: its check waits for the first guest request.
func (s *Service) checkAdoptedGuest(ctx context.Context, e *entry, paused bool) {
	if paused {
		e.guestCheck.Store(&guestCheck{h: e.handle(), pending: true})
		return
	}
	s.checkGuest(ctx, e)
}

// checkGuest asks e's agent its protocol version and records the verdict.
// An agent that does not answer is left to fail the requests themselves,
// as before versioning.
func (s *Service) checkGuest(ctx context.Context, e *entry) {
	h := e.handle()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := guestclient.New(e.guest).Ping(ctx)
	if err != nil {
		e.guestCheck.Store(nil)
		s.log.Warn("guest agent did not say its protocol version", "sandbox", e.id, "err", err)
		return
	}
	refused := proto.Supported(info)
	if refused == nil {
		e.guestCheck.Store(nil)
	} else {
		e.guestCheck.Store(&guestCheck{h: h, refused: refused})
		s.log.Warn("sandbox "+guestRefusedPrefix+"its guest agent speaks a protocol this daemon does not serve; it keeps running, but exec, files and the rest of its guest routes are refused",
			"sandbox", e.id, "guest_version", info.Version, "guest_protocol", info.Protocol, "err", refused)
	}
	s.log.Debug("guest agent", "sandbox", e.id, "guest_version", info.Version, "guest_protocol", info.Protocol)
	// The record's error says it too, until a later check finds an
	// agent this daemon serves.
	sctx := context.WithoutCancel(ctx)
	if refused == nil {
		if rec, err := s.st.GetSandbox(sctx, e.id); err != nil || !strings.HasPrefix(rec.Error, guestRefusedPrefix) {
			return
		}
	}
	_ = s.st.UpdateSandbox(sctx, e.id, func(r *store.SandboxRecord) error {
		if refused != nil {
			r.Error = guestRefusedPrefix + refused.Error()
		} else if strings.HasPrefix(r.Error, guestRefusedPrefix) {
			r.Error = ""
		}
		return nil
	})
}

// guestRefused is why e's agent is refused guest requests, nil if it is
// not (the common case costs one atomic load).
func (s *Service) guestRefused(ctx context.Context, e *entry) error {
	c := e.guestCheck.Load()
	if c == nil || c.h != e.handle() {
		return nil
	}
	if c.pending {
		s.checkGuest(ctx, e)
		if c = e.guestCheck.Load(); c == nil {
			return nil
		}
	}
	if c.refused == nil {
		return nil
	}
	return errdefs.Precondition("sandbox %s %s%v", e.id, guestRefusedPrefix, c.refused)
}
