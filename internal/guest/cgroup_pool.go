package guest

// readyMax is how many exec children the set keeps made ahead. One serves
// a sandbox's execs one after another; the second absorbs two at once.
// Concurrent execs beyond it make their own, as before.
const readyMax = 2

// take returns a child for the next exec: one made ahead if there is one,
// else a new one, and then has tidy make more. Otherwise tidy runs when
// an exec ends (release), not while one starts: mkdir and rmdir take the
// kernel's cgroup mutex, which the starting thread's moves need too.
// Nothing is made ahead before the first exec, so a standby agent
// (drivers/container Promote) has no children of its own until it serves,
// and then under names no earlier agent made (cgroupSet.tag).
func (s *cgroupSet) take() (*execCgroup, error) {
	s.mu.Lock()
	n := len(s.ready)
	if n == 0 {
		s.startTidyLocked()
		s.mu.Unlock()
		return s.create()
	}
	c := s.ready[n-1]
	s.ready[n-1] = nil
	s.ready = s.ready[:n-1]
	s.mu.Unlock()
	return c, nil
}

// release hands the child of an exec that ended (or never started) to
// tidy for removal, once the starting thread has left it. After close it
// is removed at once.
func (s *cgroupSet) release(c *execCgroup) {
	c.waitOut()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.remove()
		return
	}
	s.done = append(s.done, c)
	s.startTidyLocked()
	s.mu.Unlock()
}

func (s *cgroupSet) startTidyLocked() {
	if s.tidying || s.closed {
		return
	}
	s.tidying = true
	go s.tidy() // ends when there is nothing left to do; close waits for it
}

// tidy removes released children, retries lingering ones, and makes
// children ahead up to readyMax, until there is nothing left to do.
func (s *cgroupSet) tidy() {
	s.mu.Lock()
	defer func() {
		s.tidying = false
		s.idle.Broadcast()
		s.mu.Unlock()
	}()
	for {
		done := s.done
		s.done = nil
		want := readyMax - len(s.ready)
		if s.closed {
			want = 0
		}
		if len(done) == 0 && want <= 0 {
			return
		}
		s.mu.Unlock()
		for _, c := range done {
			c.remove()
		}
		if len(done) > 0 {
			s.sweep()
		}
		var made []*execCgroup
		var err error
		for range want {
			var c *execCgroup
			if c, err = s.create(); err != nil {
				break
			}
			made = append(made, c)
		}
		s.mu.Lock()
		s.ready = append(s.ready, made...)
		if err != nil {
			// Execs make their own meanwhile (and report the error).
			s.log.Warn("making exec cgroups ahead", "err", err)
			return
		}
	}
}

// close stops making children ahead, waits for tidy, removes the ready
// and released children, and kills what is left in lingering ones.
func (s *cgroupSet) close() {
	s.mu.Lock()
	s.closed = true
	for s.tidying {
		s.idle.Wait()
	}
	rest := append(s.ready, s.done...)
	s.ready, s.done = nil, nil
	s.mu.Unlock()
	for _, c := range rest {
		c.remove()
	}
	s.killLingering()
}

// remove closes the child's fds and removes it. A child that still holds
// processes (the exec left background work behind) lingers, and is
// retried after later execs and killed at shutdown.
func (c *execCgroup) remove() {
	if c.rmdir() {
		return
	}
	c.set.mu.Lock()
	c.set.lingering = append(c.set.lingering, c)
	c.set.mu.Unlock()
}

// sweep retries the removal of lingering children.
func (s *cgroupSet) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.lingering[:0]
	for _, c := range s.lingering {
		if !c.rmdir() {
			kept = append(kept, c)
		}
	}
	clear(s.lingering[len(kept):])
	s.lingering = kept
}

// killLingering kills what is left in lingering children and removes them.
func (s *cgroupSet) killLingering() {
	s.mu.Lock()
	ls := s.lingering
	s.lingering = nil
	s.mu.Unlock()
	for _, c := range ls {
		if err := c.kill(); err != nil {
			s.log.Warn("killing background processes", "cgroup", c.name, "err", err)
		}
		c.remove()
	}
}
