package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// lifecycle measures create and destroy per template, and
// create-to-first-output.
func (r *runner) lifecycle(ctx context.Context) {
	for _, t := range r.templates {
		cname, dname := "create/"+t, "destroy/"+t
		if !r.want(cname) && !r.want(dname) {
			continue
		}
		var destroys []time.Duration
		destroyErrs := 0
		res := r.sample(ctx, cname, GroupLifecycle, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
			var id string
			d, err := timed(func() error {
				sb, err := r.c.CreateSandbox(ctx, createReq(t))
				if sb != nil {
					id = sb.ID
				}
				return err
			})
			if id != "" {
				dd, derr := timed(func() error { return r.destroy(ctx, id) })
				if derr != nil {
					destroyErrs++
				} else {
					destroys = append(destroys, dd)
				}
			}
			return d, err
		})
		res.Floor = "baseline/namespaces"
		if r.want(cname) {
			r.add(res)
		}
		if r.want(dname) {
			r.add(Result{Name: dname, Group: GroupLifecycle, Summary: Summarize(destroys), Errors: destroyErrs})
		}
	}

	// Egress internet: the same create plus the sandbox's veth, address
	// and firewall chain.
	if ename := "create/" + r.templates[0] + " (egress internet)"; r.want(ename) {
		res := r.sample(ctx, ename, GroupLifecycle, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
			req := createReq(r.templates[0])
			req.Network = &api.Network{Egress: api.EgressInternet}
			return r.createThenDestroy(ctx, req)
		})
		res.Floor = "baseline/namespaces"
		r.add(res)
	}

	// The gvisor tier, cold: runsc's boot is most of it (baseline/runsc).
	if gname := "create/" + r.templates[0] + " (gvisor)"; r.want(gname) {
		res := r.sample(ctx, gname, GroupLifecycle, max(min(r.opts.N, 20), 3), true, func(ctx context.Context) (time.Duration, error) {
			req := createReq(r.templates[0])
			req.Isolation = "gvisor"
			return r.createThenDestroy(ctx, req)
		})
		res.Floor = "baseline/runsc"
		r.add(res)
	}

	r.microvm(ctx)

	name := "create-to-first-output"
	if !r.want(name) {
		return
	}
	t := r.templates[0]
	res := r.sample(ctx, name, GroupLifecycle, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
		var id string
		d, err := timed(func() error {
			sb, err := r.c.CreateSandbox(ctx, createReq(t))
			if err != nil {
				return err
			}
			id = sb.ID
			res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"echo", "hi"}})
			if err != nil {
				return err
			}
			if res.Stdout != "hi\n" || res.ExitCode != 0 {
				return fmt.Errorf("echo hi printed %q, exit %d", res.Stdout, res.ExitCode)
			}
			return nil
		})
		if id != "" {
			_ = r.destroy(ctx, id)
		}
		return d, err
	})
	res.Name = name + " (" + t + ")"
	res.Floor = "baseline/namespaces"
	r.add(res)
}

// withSandbox runs fn with a fresh sandbox of the first template, and
// destroys it afterwards.
func (r *runner) withSandbox(ctx context.Context, what string, fn func(id string)) {
	sb, err := r.c.CreateSandbox(ctx, createReq(r.templates[0]))
	if err != nil {
		r.note("%s: skipped, could not create a sandbox: %v", what, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	fn(sb.ID)
}

// execs measures exec round trips (buffered and streamed) of `true`, and
// the stdout throughput of a stream.
func (r *runner) execs(ctx context.Context) {
	names := []string{"exec/true", "exec-stream/true", "exec-stream/stdout"}
	if r.want(names[2]) {
		defer r.streamThroughput(ctx)
	}
	if !r.wantAny(names[0], names[1], names[1]+" (keep-alive)") {
		return
	}
	r.withSandbox(ctx, "exec", func(id string) {
		n := r.opts.N * 4
		if r.want(names[0]) {
			res := r.sample(ctx, names[0], GroupExec, n, true, func(ctx context.Context) (time.Duration, error) {
				return timed(func() error {
					res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}})
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("true exited %d", res.ExitCode)
					}
					return err
				})
			})
			res.Floor = "baseline/fork-exec"
			r.add(res)
		}
		// Streams: on a fresh connection each (as the CLI runs them), and
		// on the shared keep-alive connection.
		type via struct {
			name string
			c    *client.Client
		}
		vias := []via{{names[1] + " (keep-alive)", r.c}}
		if r.opts.FreshClient != nil {
			vias = append([]via{{names[1], r.opts.FreshClient}}, vias...)
		}
		for _, v := range vias {
			if !r.want(v.name) {
				continue
			}
			res := r.sample(ctx, v.name, GroupExec, n, true, func(ctx context.Context) (time.Duration, error) {
				return timed(func() error {
					ev, err := v.c.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"true"}}, nil, nil, nil)
					if err == nil && (ev.ExitCode == nil || *ev.ExitCode != 0) {
						err = fmt.Errorf("true did not exit 0: %+v", ev)
					}
					return err
				})
			})
			res.Floor = "baseline/fork-exec"
			r.add(res)
		}
	})
}

// lineStreamFloor is the stream lines' floor: the same producer into a
// pipe inside the same sandbox, which is what a program there would get
// from a local reader.
const lineStreamFloor = "exec-stream/stdout floor"

// streamThroughput measures the stdout throughput of an exec stream,
// `head -c SIZE /dev/zero`, in binary frames (the Go client's default)
// and in NDJSON (what the Python and TypeScript SDKs read), and its floor:
// the same head into `cat > /dev/null` in the same sandbox (one buffered
// exec, its round trip counted: a few ms of some hundreds). It runs in the
// base template when the run has it (GNU coreutils' head, as a user's
// Debian or Ubuntu image has), otherwise in the first template: busybox's
// head copies 4 KiB at a time and moves about 450 MB/s into a local pipe
// on the 2-core machines, so there it, not the stream, is the limit.
func (r *runner) streamThroughput(ctx context.Context) {
	t := r.templates[0]
	if slices.Contains(r.templates, "base") {
		t = "base"
	}
	sb, err := r.c.CreateSandbox(ctx, createReq(t))
	if err != nil {
		r.note("exec-stream/stdout: skipped, could not create a %s sandbox: %v", t, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	id := sb.ID
	size, rounds := int64(200<<20), 3
	if r.opts.Quick {
		size, rounds = 20<<20, 2
	}
	head := "head -c " + strconv.FormatInt(size, 10) + " /dev/zero"
	suffix := fmt.Sprintf(" (%d MiB, %s)", size>>20, t)
	var total int64
	var busy time.Duration
	floor := r.sampleT(ctx, lineStreamFloor, GroupExec, rounds, true, bigSampleTimeout, func(ctx context.Context) (time.Duration, error) {
		d, err := timed(func() error {
			res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", head + " | cat > /dev/null"}})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("%s | cat exited %d: %s", head, res.ExitCode, res.Stderr)
			}
			return err
		})
		if err == nil {
			total += size
			busy += d
		}
		return d, err
	})
	floor.Name += suffix
	floor.Rate, floor.RateUnit = mbps(total, busy), "MB/s"
	r.add(floor)
	for _, format := range []string{"", "ndjson"} {
		total, busy = 0, 0
		sc := r.c
		if r.opts.FreshClient != nil {
			sc = r.opts.FreshClient
		}
		if format == "ndjson" {
			sc = sc.NDJSONStreams()
		}
		res := r.sampleT(ctx, "exec-stream/stdout", GroupExec, rounds, false, bigSampleTimeout, func(ctx context.Context) (time.Duration, error) {
			var cw countWriter
			d, err := timed(func() error {
				ev, err := sc.ExecStream(ctx, id, api.ExecRequest{Cmd: []string{"head", "-c", strconv.FormatInt(size, 10), "/dev/zero"}}, nil, &cw, nil)
				if err == nil && (ev.ExitCode == nil || *ev.ExitCode != 0) {
					err = fmt.Errorf("head did not exit 0: %+v", ev)
				}
				return err
			})
			if err == nil && cw.n.Load() != size {
				err = fmt.Errorf("got %d bytes of stdout, want %d", cw.n.Load(), size)
			}
			if err == nil {
				total += size
				busy += d
			}
			return d, err
		})
		res.Name += suffix
		if format != "" {
			res.Name = strings.TrimSuffix(res.Name, ")") + ", " + format + ")"
		}
		res.Rate, res.RateUnit = mbps(total, busy), "MB/s"
		res.Floor = floor.Name
		r.add(res)
	}
}

func (r *runner) wantAny(names ...string) bool {
	for _, n := range names {
		if r.want(n) {
			return true
		}
	}
	return false
}

type countWriter struct{ n atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// mbps is bytes over d in MB/s (10^6 bytes).
func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// files measures writing and reading files of three sizes.
func (r *runner) files(ctx context.Context) {
	sizes := []struct {
		label string
		size  int
		n     int
	}{
		{"4KiB", 4 << 10, r.opts.N * 2},
		{"1MiB", 1 << 20, r.opts.N},
		{"100MiB", 100 << 20, max(r.opts.N/10, 2)},
	}
	if r.opts.Quick {
		sizes[2].n = 1
	}
	var selected bool
	for _, s := range sizes {
		selected = selected || r.wantAny("files/write-"+s.label, "files/read-"+s.label)
	}
	if !selected {
		return
	}
	r.withSandbox(ctx, "files", func(id string) {
		for _, s := range sizes {
			data := bytes.Repeat([]byte("agentbox"), s.size/8)
			path := "/tmp/agentbox-bench-" + s.label
			wname, rname := "files/write-"+s.label, "files/read-"+s.label
			if r.want(wname) || r.want(rname) {
				var moved int64
				var busy time.Duration
				res := r.sampleT(ctx, wname, GroupFiles, s.n, true, bigSampleTimeout, func(ctx context.Context) (time.Duration, error) {
					d, err := timed(func() error {
						info, err := r.c.WriteFile(ctx, id, path, bytes.NewReader(data), 0o644)
						if err == nil && info.Size != int64(len(data)) {
							err = fmt.Errorf("wrote %d bytes, the guest has %d", len(data), info.Size)
						}
						return err
					})
					if err == nil {
						moved += int64(len(data))
						busy += d
					}
					return d, err
				})
				res.Rate, res.RateUnit = mbps(moved, busy), "MB/s"
				if r.want(wname) {
					r.add(res)
				}
			}
			if r.want(rname) {
				var moved int64
				var busy time.Duration
				res := r.sampleT(ctx, rname, GroupFiles, s.n, true, bigSampleTimeout, func(ctx context.Context) (time.Duration, error) {
					d, err := timed(func() error {
						rc, err := r.c.ReadFile(ctx, id, path)
						if err != nil {
							return err
						}
						defer rc.Close()
						n, err := io.Copy(io.Discard, rc)
						if err == nil && n != int64(len(data)) {
							err = fmt.Errorf("read %d bytes, want %d", n, len(data))
						}
						return err
					})
					if err == nil {
						moved += int64(len(data))
						busy += d
					}
					return d, err
				})
				res.Rate, res.RateUnit = mbps(moved, busy), "MB/s"
				r.add(res)
			}
			_ = r.c.Remove(ctx, id, path, false)
		}
	})
}

// microvm measures the microvm tier where the daemon offers it: a cold
// create (a VM booted to an answering agent, then destroyed), an exec on
// a running VM and a fork with memory (per child, of a fork of two); a
// note says which accelerator ran them (QEMU's emulation, or KVM) or why
// the tier was skipped.
func (r *runner) microvm(ctx context.Context) {
	cname := "create/" + r.templates[0] + " (microvm)"
	ename := "exec/true (microvm)"
	fname := "fork/memory per child (microvm)"
	if !r.want(cname) && !r.want(ename) && !r.want(fname) {
		return
	}
	info, err := r.c.Info(ctx)
	if err != nil {
		r.note("microvm lines: skipped, GET /v1/info: %v", err)
		return
	}
	for _, t := range info.Tiers {
		if t.Name == "microvm" && !t.Available {
			r.note("microvm lines: skipped, the tier is not offered here: %s", t.Error)
			return
		}
	}
	req := createReq(r.templates[0])
	req.Isolation = "microvm"
	if r.want(cname) {
		// A boot takes seconds under emulation: a few samples.
		res := r.sampleT(ctx, cname, GroupLifecycle, max(min(r.opts.N, 5), 3), false, 3*time.Minute, func(ctx context.Context) (time.Duration, error) {
			return r.createThenDestroy(ctx, req)
		})
		res.Floor = "baseline/namespaces"
		r.add(res)
	}
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("microvm lines: could not create a sandbox: %v", err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	r.note("microvm lines ran on accelerator %q", sb.Accelerator)
	if r.want(ename) {
		res := r.sample(ctx, ename, GroupExec, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				res, err := r.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", res.ExitCode)
				}
				return err
			})
		})
		res.Floor = "exec/true"
		r.add(res)
	}
	if r.want(fname) {
		const kids = 2
		res := r.sampleT(ctx, fname, GroupLifecycle, max(min(r.opts.N, 5), 3), false, 3*time.Minute, func(ctx context.Context) (time.Duration, error) {
			var ks []api.Sandbox
			d, err := timed(func() (err error) { ks, err = r.c.ForkSandboxWithMemory(ctx, sb.ID, kids); return err })
			for _, k := range ks {
				_ = r.destroy(ctx, k.ID)
			}
			return d / kids, err
		})
		r.add(res)
	}
}
