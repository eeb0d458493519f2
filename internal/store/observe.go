package store

// SandboxObserver is told of every sandbox record written: prev is the
// state it had before the write ("" for a new record) and rec the record
// as stored. It runs after the write committed, in the writer's
// goroutine, and must not block or call the Store; rec is the caller's
// and must not be kept.
type SandboxObserver func(prev string, rec *SandboxRecord)

// ObserveSandboxes sets the observer of sandbox writes (one; nil for
// none). The sandbox service derives its lifecycle events from it.
func (s *Store) ObserveSandboxes(fn SandboxObserver) {
	if fn == nil {
		s.observer.Store(nil)
		return
	}
	s.observer.Store(&fn)
}

// noteSandbox tells the observer, if any, of a committed write.
func (s *Store) noteSandbox(prev string, rec *SandboxRecord) {
	if fn := s.observer.Load(); fn != nil {
		(*fn)(prev, rec)
	}
}
