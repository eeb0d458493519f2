// Package sandbox is the lifecycle service: it validates requests, records
// every fact in the store, drives the isolation drivers and the storage
// pool, enforces TTLs, and re-adopts or cleans up sandboxes when the daemon
// restarts. A request's context never owns a sandbox: teardown always runs
// on a context of its own.
//
// # States
//
// A sandbox record's State changes only through setState (state.go),
// whose table lists every allowed move; docs/ARCHITECTURE.md shows the
// same table.
//
// # Locks and what they guard
//
//   - Service.coldMu serializes cold starts of stopped sandboxes
//     (coldStart): two resumes of one stopped sandbox boot it once.
//   - entry.op guards an entry's lifecycle fields (destroying, gen, and
//     its standby slot's next) and serializes its lifecycle operations:
//     destroy, pause, resume, snapshot, reset, pause to disk, keepStopped.
//     Its handle (hp), paused, onDisk, and its standby slot's preparing
//     and spawning are atomics: written only with op
//     held (or before the entry is in the live map), read without it (a guest dial, Live, withDisk), so a reader
//     may see the value of just before or just after an operation. act
//     (the idle clock) is atomics with no lock at all.
//   - quotas.mu guards the reservations of creates in flight (quota.go).
//   - Service.mu guards the live map and nothing else; it is held only to
//     read or change the map, never across I/O.
//   - warmPools.mu guards the warm pools' ready lists, claimed members,
//     counters and closed flag (warmpool.go); warmPools.busy is an atomic.
//   - standbys (standby.go) has no lock of its own: a sandbox's standby
//     state is its entry's standbySlot, under that entry's op. Its host
//     (standbyHost: run dir, driver spec) takes no lock. It is called
//     with entry.op held (drop, take, promote, prepare's start) or takes
//     it itself, alone, in prepare's background boot; it never takes
//     Service.mu, and it does not change the entry's handle, state or
//     record: resetFast (reset.go) does that around take and promote.
//   - checkpoints (memsnap.go) has no lock: its state is its directory
//     tree, and what it asks of the service (checkpointHost: is a sandbox
//     paused to disk, a snapshot's record) takes Service.mu or the store
//     only, never entry.op, so it may be called with entry.op held (a
//     snapshot with memory is). It does not change entries or records:
//     pause to disk, resume from disk and re-adoption do that, as entry
//     operations under entry.op.
//
// # Lock order
//
// A goroutine that holds more than one takes them in this order:
//
//	coldMu  ->  entry.op  ->  quotas.mu  ->  Service.mu
//
// and never holds two entries' op at once. warmPools.mu is taken with
// none of the others held and takes none of them: a warm member passes
// to a sandbox (recordWarm, then Service.mu) only after it left the pool
// under warmPools.mu. The store and the event hub are leaves: they are
// called with any of these held and call back into the service only
// through noteRecord, which takes no lock. Waits on an entry's channels
// (waitSpawn, waitStandby) happen with op held only for spawning, whose
// closer never takes op.
package sandbox
