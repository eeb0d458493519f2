package sandbox

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// The sandbox state machine. A record's State changes only through
// setState, which applies a move the table lists and refuses any other
// with an ErrInvalidTransition (the record then stays as it was). A move
// to the state a record already has is always allowed: it changes no
// state, only the record's other fields (a reset records a new handle on
// a running sandbox). docs/ARCHITECTURE.md ("State and lifecycle") shows
// the same table; TestTransitionTableDocumented keeps the two equal.
//
// Who makes each move:
//
//	creating   -> running     Create, Fork, a warm pool hand-out
//	creating   -> failed      a boot that failed; recovery of a sandbox
//	                          mid-create when the daemon stopped
//	creating   -> destroying  Destroy of a sandbox whose create still runs
//	creating   -> destroyed   Destroy racing a create (nothing live yet)
//	running    -> paused      Pause, pause to disk, the reaper (on_timeout pause)
//	running    -> stopped     a persistent sandbox's init died
//	running    -> destroying  Destroy, TTL or idle expiry, an init that died
//	running    -> failed      a reset that failed; recovery of a lost init
//	running    -> destroyed   Destroy of a sandbox no init of this daemon
//	                          runs for (a create not yet registered)
//	paused     -> running     Resume (in memory or from disk), Reset
//	paused     -> stopped     a paused sandbox's init died
//	paused     -> destroying  Destroy, TTL expiry
//	paused     -> failed      a reset or resume that failed; a lost init
//	paused     -> destroyed   Destroy of a sandbox no init runs for, as above
//	stopped    -> running     Resume (a cold start)
//	stopped    -> destroyed   Destroy (nothing runs, its files go)
//	destroying -> destroyed   the end of a destroy (also at recovery)
//	destroying -> failed      the end of a teardown after a failure
//	failed     -> destroyed   Destroy of a failed sandbox (it keeps its error)
var transitions = map[string][]string{
	api.StateCreating:   {api.StateRunning, api.StateFailed, api.StateDestroying, api.StateDestroyed},
	api.StateRunning:    {api.StatePaused, api.StateStopped, api.StateDestroying, api.StateFailed, api.StateDestroyed},
	api.StatePaused:     {api.StateRunning, api.StateStopped, api.StateDestroying, api.StateFailed, api.StateDestroyed},
	api.StateStopped:    {api.StateRunning, api.StateDestroyed},
	api.StateDestroying: {api.StateDestroyed, api.StateFailed},
	api.StateFailed:     {api.StateDestroyed},
	api.StateDestroyed:  nil,
}

// ErrInvalidTransition is the class of a state change the table does not
// allow; it is also a failed precondition.
var ErrInvalidTransition = errors.New("invalid sandbox state transition")

// transitionError is a refused state change.
type transitionError struct {
	id, from, to string
}

func (e *transitionError) Error() string {
	return fmt.Sprintf("sandbox %s is %s and cannot become %s", e.id, e.from, e.to)
}

func (e *transitionError) Is(target error) bool {
	return target == ErrInvalidTransition || target == errdefs.ErrFailedPrecondition
}

// canTransition reports whether a record in state from may move to to.
func canTransition(from, to string) bool {
	if from == to {
		_, known := transitions[from]
		return known
	}
	return slices.Contains(transitions[from], to)
}

// setState moves r to state to, or returns an ErrInvalidTransition and
// leaves r as it is. It is the only code that writes a record's State
// (a new record starts as creating).
func setState(r *store.SandboxRecord, to string) error {
	if !canTransition(r.State, to) {
		return &transitionError{id: r.ID, from: r.State, to: to}
	}
	r.State = to
	return nil
}

// transition is setState for the service's writes: a refused move is
// also logged (it is a race lost or a bug), never applied.
func (s *Service) transition(r *store.SandboxRecord, to string) error {
	err := setState(r, to)
	if err != nil {
		s.log.Warn("refused a state change", "sandbox", r.ID, "from", r.State, "to", to)
	}
	return err
}
