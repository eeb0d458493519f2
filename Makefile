# agentbox build and test entry points. The README's two commands are
# `make up` (install everything, build, start, demo) and `make test`.
GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/agentbox/agentbox/internal/version.Version=$(VERSION)

.PHONY: image bench-fleet bench-density build console-assets install deps up test test-under-load test-unit test-integration bench bench-scale soak clean lint fuzz battery battery-microvm

# console-assets copies xterm.js (npm, pinned) where go:embed takes it for
# the web console (docs/console.md); go build works without it.
build: console-assets
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox ./cmd/agentbox
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentboxd ./cmd/agentboxd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agentbox-guest ./cmd/agentbox-guest

console-assets:
	scripts/console-assets.sh

install: build
	install -D -m 0755 $(BIN)/agentbox /usr/local/bin/agentbox
	install -D -m 0755 $(BIN)/agentboxd /usr/local/bin/agentboxd
	install -D -m 0755 $(BIN)/agentbox-guest /usr/local/lib/agentbox/agentbox-guest

deps:
	scripts/install-deps.sh

# `make image IMAGE=HOST:PORT/REPO:TAG` builds agentbox's own OCI image for
# deploy/ (nodes and gateways on Kubernetes, docs/cluster.md) and pushes it
# there through the running daemon: no container engine needed.
image: build
	@test -n "$(IMAGE)" || { echo "make image: set IMAGE=HOST:PORT/REPO:TAG, the registry to push to"; exit 2; }
	scripts/build-image.sh $(IMAGE)

up:
	scripts/setup.sh

test:
	scripts/test.sh

# `make test-under-load` runs `make test` while stress-ng keeps every core
# busy (scripts/test-under-load.sh): no verdict may depend on a fast
# machine.
test-under-load:
	scripts/test-under-load.sh

test-unit:
	$(GO) test ./...

# `make bench` measures a running daemon against the performance budget
# (docs/PERFORMANCE.md): it installs the binaries, installs runc for the
# baseline if apt can, starts the daemon if it is not running, builds the
# busybox and base templates if missing, installs the e2b lines' npm
# packages (integration/e2b) where npm is there, then runs `agentbox bench`.
# BENCH_FLAGS passes flags, e.g. make bench BENCH_FLAGS='--quick'.
BENCH_FLAGS ?= --json $(BIN)/bench.json
bench: install
	@command -v runc >/dev/null 2>&1 || apt-get install -y -q runc >/dev/null 2>&1 || echo "bench: runc is not installed; its baseline is skipped"
	@command -v bwrap >/dev/null 2>&1 || apt-get install -y -q bubblewrap >/dev/null 2>&1 || echo "bench: bubblewrap is not installed; its baseline is skipped"
	scripts/daemon.sh start
	AGENTBOX=$(BIN)/agentbox scripts/build-template.sh busybox
	AGENTBOX=$(BIN)/agentbox scripts/build-template.sh base
	@if command -v npm >/dev/null 2>&1 && [ ! -d integration/e2b/node_modules ]; then (cd integration/e2b && npm ci --no-audit --no-fund >/dev/null) || echo "bench: npm ci in integration/e2b failed; the e2b lines are skipped"; fi
	$(BIN)/agentbox bench $(BENCH_FLAGS)

# `make bench-fleet` prints the fleet lines (docs/PERFORMANCE.md, "Fleet"):
# create and exec through a fleet gateway against the same node directly,
# on a node daemon the script starts beside the host's (scripts/bench-fleet.sh).
bench-fleet: install
	BIN=$(BIN) scripts/bench-fleet.sh $(BENCH_FLAGS)

# `make bench-scale` draws the cost curves (docs/PERFORMANCE.md, "Cost
# curves"): create, exec, destroy and a list page timed with 0 to 2,000
# idle sandboxes alive, printed and drawn to $(SCALE_PNG).
SCALE       ?= 0,500,1000,2000
SCALE_PNG   ?= docs/images/scale.png
bench-scale: install
	scripts/daemon.sh start
	AGENTBOX=$(BIN)/agentbox scripts/build-template.sh busybox
	$(BIN)/agentbox bench --templates busybox --only '^scale' --scale $(SCALE) --n 40 --json $(BIN)/scale.json $(BENCH_FLAGS)
	$(GO) run ./cmd/agentbox-benchchart -json $(BIN)/scale.json -o $(SCALE_PNG)

# `make bench-density` fills a daemon the script starts beside the host's
# with idle busybox sandboxes up to $(DENSITY) (or until MemAvailable is
# under 3 GiB), printing the host's counts after each 100, then destroys
# them (docs/PERFORMANCE.md, "Density at 5,000"; scripts/bench-density.sh).
DENSITY     ?= 5000
bench-density: install
	BIN=$(BIN) scripts/bench-density.sh $(DENSITY)

# `make battery` runs only the hostile battery and the posture check
# (docs/SECURITY.md) against a test daemon, on every isolation tier it
# offers (AGENTBOX_TEST_TIERS=container,gvisor narrows them), and prints
# the item x tier table with each verdict's evidence. Root; it installs
# what the tests need and builds the busybox and base templates if missing.
BATTERY_REPORT ?= /tmp/agentbox-battery.txt
battery:
	scripts/install-deps.sh
	$(MAKE) -s build
	scripts/build-template.sh busybox --no-import
	scripts/build-template.sh base --no-import
	rm -f $(BATTERY_REPORT)
	AGENTBOX_TEST_TIERS=$(AGENTBOX_TEST_TIERS) AGENTBOX_BATTERY_REPORT=$(BATTERY_REPORT) $(GO) test -count=1 -timeout 30m -run 'TestBattery$$|TestBatteryAPI$$|TestPosture$$' ./integration/; \
		rc=$$?; cat $(BATTERY_REPORT); exit $$rc

# `make battery-microvm` runs the whole hostile battery and the posture
# check on the microvm tier alone (every CI run has only a few of its
# items there: integration/tiers_test.go's ciItems). Root, as `make
# battery`, whose scripts/install-deps.sh installs the tier's QEMU and
# guest kernel (scripts/install-microvm.sh).
battery-microvm:
	$(MAKE) battery AGENTBOX_TEST_TIERS=microvm

# `make fuzz` runs every fuzz target for FUZZTIME each (scripts/fuzz.sh);
# CI runs only their committed seed corpora, as unit tests.
FUZZTIME ?= 10m
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

lint:
	$(GO) vet ./...
	test -z "$$(gofmt -l .)"

clean:
	rm -rf $(BIN)
